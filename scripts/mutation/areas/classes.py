"""Mutants by class of bug across the studies (tests/lab/test_study_classes*.py): which block
or pair an intervention touches, the direction and averaging of a metric, a SOURCE's kind
found in the wrong order, a bound moved by one, an estimate off by a factor, and a load
reading that ignores the load. Each test computes its expectation independently."""

from mutation import Mutant

T = ("tests/lab/test_study_classes.py", "tests/lab/test_study_classes_2.py")
F = "lab/lesion/interventions.py"
M = "lab/lesion/measure.py"
TAB = "lab/lesion/tables.py"
X = "lab/paths/exact.py"
B = "lab/study/budget.py"
W = "lab/study/windows.py"
S = "train/source.py"
TH = "perf/threads.py"

_RUN_LAST = """        if any(os.path.exists(os.path.join(name, f)) for f in (LAST, BEST)):
            return "run", os.path.join(name, LAST)
"""
_HF = """        if os.path.exists(os.path.join(name, CONFIG)):
            return "hf-dir", name
"""
_KILLED = """        if any(os.path.exists(os.path.join(name, f)) for f in _RUN_FILES) or kept_checkpoints(name):
            return "run", None  # killed before its first checkpoint: said once flags are checked
"""

MUTANTS = [
    # 1. which block or pair an intervention touches
    Mutant("classes: delete_branch deletes the other branch", F,
           'attn, mlp = (keep, on) if branch == "attn" else (on, keep)',
           'attn, mlp = (on, keep) if branch == "attn" else (keep, on)', T, "formula"),
    Mutant("classes: a swap copies block j to position i (block j runs twice)", F,
           "order[i], order[j] = order[j], order[i]", "order[i] = order[j]", T, "formula"),
    Mutant("classes: the MLP step reads the attention's keep flag", M,
           "x = _step(x, P, p, 1, cfg, alpha, lesion.mlp[pos])",
           "x = _step(x, P, p, 1, cfg, alpha, lesion.attn[pos])", T, "formula"),
    Mutant("classes: the plan's swaps ignore --blocks", F,
           'out += [swap_blocks(L, [(i, i + 1)], "swap") for i in layers if i + 1 < L]',
           'out += [swap_blocks(L, [(i, i + 1)], "swap") for i in range(L - 1)]', T, "names"),
    Mutant("classes: balanced deletion sets never draw the last block", F,
           'np.argsort(key, kind="stable")[:k]', 'np.argsort(key[:-1], kind="stable")[:k]',
           ("tests/lab/test_lesion_sets.py",), "bounds"),
    Mutant("classes: random pair sets pair overlapping neighbours", F,
           "for j in range(0, 2 * k, 2))))", "for j in range(0, 2 * k - 1))))", T, "formula"),
    Mutant("classes: every pair set enumerated leaves the last block out", F,
           "for c in itertools.combinations(range(L), 2 * k)",
           "for c in itertools.combinations(range(L - 1), 2 * k)", T, "bounds"),
    # 2. the direction and the averaging of a metric
    Mutant("classes: a random k's set is its first seed, not its seed mean", TAB,
           "per_set = result.values[js].mean(axis=1)  # (K, M): each set over the seeds",
           "per_set = result.values[js][:, 0]  # (K, M): each set over the seeds", T,
           "statistics"),
    Mutant("classes: the table's std is the standard error", TAB,
           "return a.std(axis=axis, ddof=1)",
           "return a.std(axis=axis, ddof=1) / np.sqrt(a.shape[axis])", T, "statistics"),
    Mutant("classes: across runs, the std is the mean of the runs' stds", TAB,
           "row = r0._replace(mean=_floats(means.mean(axis=0)), std=_floats(_std(means)))",
           "row = r0._replace(mean=_floats(means.mean(axis=0)), "
           "std=_floats(np.mean([t[j].std for t in tables], axis=0)))", T, "statistics"),
    Mutant("classes: agreement is a count of rows, not a fraction", M,
           "agree, acc = float(np.mean(top == ref.top)), float(np.mean(top == ref.y))",
           "agree, acc = float(np.sum(top == ref.top)), float(np.mean(top == ref.y))", T,
           "statistics"),
    Mutant("classes: KL's cross term with the logits' difference reversed", M,
           "d = ref.z - z  # (N, V)", "d = z - ref.z  # (N, V)", T, "formula"),
    Mutant("classes: the intact CE with its sign flipped", M,
           "ce = float(np.mean(lse - z[np.arange(len(y)), y]))",
           "ce = float(np.mean(z[np.arange(len(y)), y] - lse))", T, "formula"),
    Mutant("classes: paths' k = 0 share across runs is the projection share", "lab/paths/runs.py",
           "share0 = np.array([c.rows[0].share_norm for c in cs])",
           "share0 = np.array([c.rows[0].share_proj for c in cs])", T, "formula"),
    Mutant("classes: mean k divided by the number of k", "lab/paths/runs.py",
           "return float(sum(r.k * r.share_norm for r in self.rows))",
           "return float(sum(r.k * r.share_norm for r in self.rows) / len(self.rows))", T,
           "statistics"),
    Mutant("classes: shares of the norm normalised over the boundaries, not over k", X,
           "total = self.norms.sum(axis=1, keepdims=True)  # (L + 1, 1)",
           "total = self.norms.sum(axis=0, keepdims=True)  # (L + 1, 1)", T, "formula"),
    # 3. a SOURCE's kind chosen in the wrong order
    Mutant("classes: a directory's config.json looked at before its last.ckpt", S,
           _RUN_LAST + _HF, _HF + _RUN_LAST, T, "ordering"),
    Mutant("classes: a killed run's files looked at before config.json", S,
           _HF + _KILLED, _KILLED + _HF, T, "ordering"),
    Mutant("classes: any path whose name is lesson names the lesson", S,
           "    return source == LESSON",
           "    return os.path.basename(os.path.normpath(source)) == LESSON", T, "ordering"),
    Mutant("classes: 'lesson' is the lesson only where the caller takes it", S,
           'if names_lesson(name) and ("lesson" in kinds or not os.path.exists(name)):',
           'if names_lesson(name) and "lesson" in kinds:', T, "ordering"),
    # 4. a bound moved by one
    Mutant("classes: a window never starts at the last valid start", W,
           "starts = rng.integers(0, len(ids) - seq, size=batch)",
           "starts = rng.integers(0, len(ids) - seq - 1, size=batch)", T, "bounds"),
    Mutant("classes: a text of T tokens passes the window check", W,
           "if len(ids) < seq + 1:", "if len(ids) < seq:", T, "bounds"),
    Mutant("classes: by default pairs stop one k below L // 2", F,
           "pair_ks = range(1, L // 2 + 1) if ks is None", "pair_ks = range(1, L // 2) if ks is None",
           T, "bounds"),
    Mutant("classes: by default deletions stop one k below L", F,
           "del_ks = range(1, L + 1) if ks is None", "del_ks = range(1, L) if ks is None", T,
           "bounds"),
    Mutant("classes: the plan's sample seed 2**32 accepted", F,
           "seed = _int_in(PLAN_SEED_OUT_OF_RANGE, seed, 0, MAX_SEED - 1)",
           "seed = _int_in(PLAN_SEED_OUT_OF_RANGE, seed, 0, MAX_SEED)", T, "bounds"),
    Mutant("classes: the effective range never starts at the last k", X,
           "    for lo in range(s.size):\n", "    for lo in range(s.size - 1):\n", T, "bounds"),
    # 5. an estimate off by a constant factor
    Mutant("classes: the lesion estimate counts the intact pass as lesioned", F,
           "return Cost(passes - seeds, blocks,", "return Cost(passes, blocks,", T, "formula"),
    Mutant("classes: the lesion estimate leaves out the intact streams", F,
           "return seeds * sum(les.L - les.first for les in lesions) + seeds * lesions[0].L",
           "return seeds * sum(les.L - les.first for les in lesions)", T, "formula"),
    Mutant("classes: the lesion estimate counts whole forwards, not tails", F,
           "return seeds * sum(les.L - les.first for les in lesions) + seeds * lesions[0].L",
           "return seeds * sum(les.L for les in lesions) + seeds * lesions[0].L", T, "formula"),
    Mutant("classes: the lesson's estimate counts the intact pass as lesioned", F,
           "return Cost((len(lesions) - 1) * seeds,", "return Cost(len(lesions) * seeds,", T,
           "formula"),
    Mutant("classes: LesionStudy's estimate ignores the number of models", "lab/lesion/study.py",
           "lesions, len(self.seeds) * models)", "lesions, len(self.seeds))", T, "formula"),
    Mutant("classes: PathsStudy's estimate ignores the seeds", "lab/paths/study.py",
           "self.batch, models * len(self.seeds), self.veit)", "self.batch, models, self.veit)",
           T, "formula"),
    Mutant("classes: a GPT's branches counted one per block", B,
           "    n = 2 * cfg.n_layer\n", "    n = cfg.n_layer\n", T, "formula"),
    Mutant("classes: the budget refusal suggests 1.25 x the budget, not the estimate", B,
           "need = math.ceil(seconds * 1.25)", "need = math.ceil(budget * 1.25)", T, "refusal"),
    Mutant("classes: the budget refusal fires only 25% over the budget", B,
           "    if seconds > budget:\n", "    if seconds > budget * 1.25:\n", T, "refusal"),
    # 6. a load reading that ignores the load
    Mutant("classes: threads: busy cores taken off with min, not max", TH,
           "return max(1, min(usable, usable - max(0, busy)))",
           "return max(1, min(usable, usable - min(0, busy)))", T, "formula"),
    Mutant("classes: threads: a cpuset's cores counted as the whole machine's", TH,
           "default_threads(usable, busy_others(readings, usable, online))",
           "default_threads(usable, busy_others(readings, online, online))", T, "formula"),
    Mutant("classes: threads: the start's count takes no reading", TH,
           "    return _threads_for(sample_procs_running())",
           "    return _threads_for([])", T, "formula"),
    Mutant("classes: threads: other tasks floored at 0 with min", TH,
           "others = max(0.0, statistics.median(readings) - 1)",
           "others = min(0.0, statistics.median(readings) - 1)", T, "formula"),
    Mutant("classes: threads: mid-run, the reader taken off twice", TH,
           "out.append(max(1, n - (own or 1) + 1))", "out.append(max(1, n - (own or 1)))", T,
           "formula"),
    Mutant("classes: threads: the follower only ever raises the count", TH,
           "            if n != self.threads:\n", "            if n > self.threads:\n", T,
           "formula"),
]  # fmt: skip
