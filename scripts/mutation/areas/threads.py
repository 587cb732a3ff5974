"""Mutants of the default thread count (src/resgrad/perf/threads.py, resgrad.cli._threads), of
following the load in a long train (ThreadFollower, the trainer's threads=, resgrad train) and
of decoding's one-thread rule (src/resgrad/train/sample.py and what passes it down)."""

from mutation import Mutant

PERF = ("tests/perf/test_threads.py",)
CLI = ("tests/cli/test_cli_threads.py",)
BOTH = PERF + CLI
FOLLOW = ("tests/train/test_follow_threads.py",)
T = "perf/threads.py"
S = "train/sample.py"
LOOP = "train/loop.py"

MUTANTS = [
    # formula: readings -> busy cores
    Mutant("threads: the mean of the readings, so an instant's task counts", T,
           "others = max(0.0, statistics.median(readings) - 1)",
           "others = max(0.0, statistics.mean(readings) - 1)", PERF, "formula"),
    Mutant("threads: the reading process counted as another", T,
           "others = max(0.0, statistics.median(readings) - 1)",
           "others = max(0.0, statistics.median(readings))", PERF, "formula"),
    Mutant("threads: every task on the machine counted on a cpuset's cores", T,
           "share = min(usable, online) / max(online, 1)", "share = 1.0", PERF, "formula"),
    Mutant("threads: busy cores truncated, not rounded", T,
           "return int(others * share + 0.5)", "return int(others * share)", PERF, "formula"),
    # bounds: never below 1, never above the usable cores
    Mutant("threads: no floor of one thread", T,
           "return max(1, min(usable, usable - max(0, busy)))",
           "return min(usable, usable - max(0, busy))", PERF, "bounds"),
    Mutant("threads: more threads than usable cores on a negative count", T,
           "return max(1, min(usable, usable - max(0, busy)))",
           "return max(1, usable - busy)", PERF, "bounds"),
    Mutant("threads: usable cores are the machine's, not the affinity's", "train/bits.py",
           "return max(1, len(os.sched_getaffinity(0)))",
           "return max(1, os.cpu_count() or 1)", PERF, "bounds"),
    # refusal: what the reader takes for a count
    Mutant("threads: procs_running matched as a prefix", T,
           'if name == "procs_running":', 'if name.startswith("procs_running"):', PERF, "refusal"),
    Mutant("threads: an unreadable count read as 0", T,
           "                return int(value)\n            except ValueError:\n"
           "                return None",
           "                return int(value)\n            except ValueError:\n"
           "                return 0", PERF, "refusal"),
    Mutant("threads: one reading fewer than asked", T,
           "    for i in range(reads):", "    for i in range(reads - 1):", PERF, "bounds"),
    # the CLI: the default applied when --threads is absent, the flag exactly when given
    Mutant("threads: without --threads, BLAS's own choice as before", "cli/__init__.py",
           "        n = usable_cores() if sums_depend_on_count() else load_aware_threads()\n",
           "        pass\n", CLI, "formula"),
    Mutant("threads: the load-aware count overrides --threads", "cli/__init__.py",
           "    if n is None:\n        n = usable_cores()", "    if True:\n        n = usable_cores()",
           CLI, "formula"),
    # the same bytes: the load chooses only where the count changes no bit
    Mutant("bits: the load chooses the count even where it changes bits", "cli/__init__.py",
           "n = usable_cores() if sums_depend_on_count() else load_aware_threads()",
           "n = load_aware_threads()", CLI, "formula"),
    Mutant("bits: a probe that compares only the first count with itself", "train/bits.py",
           "        elif len(got) != len(first) or not all(",
           "        elif False and not all(", ("tests/train/test_same_bits.py",), "formula"),
    Mutant("bits: the follower kept where the step depends on the count", LOOP,
           "            follow = None  # the count the gate set, for the whole run",
           "            pass", ("tests/train/test_same_bits.py",), "formula"),
    Mutant("bits: the gate keeps the load's count instead of the cores", "train/bits.py",
           "    set_count(counts[-1])\n", "", ("tests/train/test_same_bits.py",), "formula"),
    Mutant("bits: the probe skips the largest count", "train/bits.py",
           "    return tuple(sorted({*upto, max(1, usable // 2), max(1, usable)}))",
           "    return tuple(sorted({*upto, max(1, usable // 2)}))",
           ("tests/train/test_same_bits.py",), "bounds"),
    # following the load: when the follower reads again
    Mutant("threads: follow: no reading on the period, only after slow steps", T,
           "if self.since >= self.every or (slow and self.since >= self.cooldown):",
           "if slow and self.since >= self.cooldown:", PERF, "formula"),
    Mutant("threads: follow: a slow step reads within the cooldown", T,
           "if self.since >= self.every or (slow and self.since >= self.cooldown):",
           "if self.since >= self.every or slow:", PERF, "bounds"),
    Mutant("threads: follow: the steps since a reading are not reset", T,
           "            self.since = 0\n            self.reads += 1\n",
           "            self.reads += 1\n", PERF, "formula"),
    Mutant("threads: follow: a normal step is the mean, which one stall lifts", T,
           "slow = known and seconds > self.slow * statistics.median(self.recent)",
           "slow = known and seconds > self.slow * statistics.mean(self.recent)", PERF,
           "statistics"),
    Mutant("threads: follow: a step is judged against a median holding itself", T,
           "        known = len(self.recent) >= self.min_steps\n"
           "        slow = known and seconds > self.slow * statistics.median(self.recent)\n"
           "        self.recent.append(seconds)\n",
           "        self.recent.append(seconds)\n"
           "        known = len(self.recent) >= self.min_steps\n"
           "        slow = known and seconds > self.slow * statistics.median(self.recent)\n",
           PERF, "ordering"),
    Mutant("threads: follow: the old count's steps stay the normal after a change", T,
           "                self.recent.clear()  # a new count: a new normal step\n", "", PERF,
           "cache"),
    Mutant("threads: follow: the new count is read but not used", T,
           "                self.threads = n\n", "                self.recent.clear()\n", PERF,
           "formula"),
    Mutant("threads: follow: a reading of 0 threads taken", T,
           'n = _count("read()", self.read(), 1)', "n = self.read()", PERF, "refusal"),
    # following the load: the mid-run reading
    Mutant("threads: follow: this process's spinning threads counted as others", T,
           "out.append(max(1, n - (own or 1) + 1))", "out.append(n)", PERF, "formula"),
    Mutant("threads: follow: the mid-run count reads procs_running alone", T,
           "    return _threads_for(sample_others_running())",
           "    return _threads_for(sample_procs_running())", PERF, "formula"),
    Mutant("threads: follow: a thread in D (waiting on a disk) counted as running", T,
           'if parse_task_state(f.read()) == "R":', 'if parse_task_state(f.read()) in "RD":',
           PERF, "formula"),
    # following the load: the trainer and resgrad train
    Mutant("threads: follow: the trainer keeps its shards' old thread count", LOOP,
           "                shards.close()\n                shards = Shards(cfg.shards)",
           "                shards = shards", FOLLOW, "cache"),
    Mutant("threads: follow: the trainer's limit outlives the run", LOOP,
           "        blas.close()\n", "", FOLLOW, "concurrency"),
    Mutant("threads: follow: a new limit over the last, never taken off", LOOP,
           "        self.close()  # back to the start's count, then the new limit over it\n",
           "", FOLLOW, "concurrency"),
    Mutant("threads: follow: a limit set again although the count is the same", LOOP,
           "        if n == self.count:\n            return False\n", "", FOLLOW, "formula"),
    Mutant("threads: follow: train(threads=N) ignores N", LOOP,
           "    if isinstance(threads, int):\n        blas.set(threads)\n", "", FOLLOW,
           "formula"),
    Mutant("threads: follow: a follower's count of 0 applied", LOOP,
           "    if isinstance(n, bool) or not isinstance(n, int) or n < 1:\n",
           "    if isinstance(n, bool) or not isinstance(n, int):\n", FOLLOW, "refusal"),
    Mutant("threads: follow: train(threads=0) accepted", LOOP,
           "    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:",
           "    if isinstance(threads, bool) or not isinstance(threads, int):", FOLLOW,
           "refusal"),
    Mutant("threads: follow: resgrad train follows the load also with --threads",
           "cli/train_cmds.py",
           "follow = ThreadFollower() if args.threads is None else None",
           "follow = ThreadFollower()", FOLLOW, "formula"),
    # decoding's rule
    Mutant("threads: a token's work without the LM head", S,
           "return L * 24 * C * C + 2 * C * V", "return L * 24 * C * C", PERF, "formula"),
    Mutant("threads: generate takes one thread although the caller set the count", S,
           "one = decode_threads(model.cfg) if auto_threads else None",
           "one = decode_threads(model.cfg)", BOTH, "formula"),
    Mutant("threads: sample's --threads also gets the small-model rule", "cli/train_cmds.py",
           "auto_threads=args.threads is None,", "auto_threads=True,", CLI, "formula"),
]  # fmt: skip
