"""Mutants of the gradient-flow lab (src/resgrad/lab/): the lesson (lesson.py), the flow
at initialization (flow.py) and on a real text (realflow.py), and depth training
(depthtrain.py)."""

# ruff: noqa: E501  (each mutant quotes its source text verbatim)

from mutation import DEPTHTRAIN, FLOW, LESSON, REALFLOW, Mutant

MUTANTS = [
    # -- lab/lesson.py (4)
    Mutant('lesson: dW forgets the tanh derivative', 'lab/lesson.py',
           'dW = x.T @ dz  # (C, B) @ (B, C) -> (C, C)',
           'dW = x.T @ dout  # (C, B) @ (B, C) -> (C, C)', LESSON, 'formula'),
    Mutant('lesson: activation norms of f(x), not of the stream', 'lab/lesson.py',
           '        act_norms.append(float(np.linalg.norm(x)))',
           '        act_norms.append(float(np.linalg.norm(f)))', LESSON, 'formula'),
    Mutant('lesson: weight-gradient norms in backward order', 'lab/lesson.py',
           'weight_grad_norms=tuple(reversed(dW_norms)),',
           'weight_grad_norms=tuple(dW_norms),', LESSON, 'ordering'),
    Mutant('lesson: a bank too short for the depth is not refused', 'lab/lesson.py',
           '    if len(Ws) < N:\n',
           '    if len(Ws) < N - 1:\n', LESSON, 'refusal'),
    # -- lab/flow/core.py (5)
    Mutant('flow: a count K means seeds 1..K', 'lab/flow/core.py',
           'return tuple(range(int(seeds)))',
           'return tuple(range(1, int(seeds) + 1))', FLOW, 'bounds'),
    Mutant('flow: duplicate seeds accepted', 'lab/flow/core.py',
           '    if len(set(out)) != len(out):\n        twice',
           '    if False:\n        twice', FLOW, 'refusal'),
    Mutant('flow: the data generator is seeded by the seed alone', 'lab/flow/core.py',
           'data_rng = np.random.default_rng([seed, 1])',
           'data_rng = np.random.default_rng(seed)', FLOW, 'formula'),
    Mutant('flow: std over the seeds with ddof=1', 'lab/flow/core.py',
           'v.mean(0), v.std(0), v.min(0), v.max(0)',
           'v.mean(0), v.std(0, ddof=1), v.min(0), v.max(0)', FLOW, 'statistics'),
    Mutant('flow: the lm loss predicts the input token, not the next', 'lab/flow/core.py',
           'idx, targets = seq[:, :-1], seq[:, 1:]',
           'idx, targets = seq[:, :-1], seq[:, :-1]', FLOW, 'formula'),
    # -- lab/flow/pretrained.py (5)
    Mutant('realflow: the last window of the text is never drawn', 'lab/study/windows.py',
           'starts = rng.integers(0, len(ids) - seq, size=batch)',
           'starts = rng.integers(0, len(ids) - seq - 1, size=batch)', REALFLOW, 'bounds'),
    Mutant('realflow: windows of T tokens, not T + 1', 'lab/study/windows.py',
           'return ids[starts[:, None] + np.arange(seq + 1)]',
           'return ids[starts[:, None] + np.arange(seq)]', REALFLOW, 'bounds'),
    Mutant('realflow: windows seeded by the seed alone', 'lab/study/windows.py',
           'rng = np.random.default_rng([seed, 1])',
           'rng = np.random.default_rng(seed)', REALFLOW, 'formula'),
    Mutant("realflow: every seed measures the first seed's windows", 'lab/flow/pretrained.py',
           'tokens = text_windows(ids, seq, batch, s)',
           'tokens = text_windows(ids, seq, batch, cfg.seeds[0])', REALFLOW, 'formula'),
    Mutant('realflow: a text of T tokens passes the length check', 'lab/study/windows.py',
           'if len(ids) < seq + 1:',
           'if len(ids) < seq:', REALFLOW, 'refusal'),
    # -- lab/experiments/depthtrain.py (4)
    Mutant('depthtrain: the cosine ends at lr / 100', 'lab/experiments/depthtrain.py',
           'min_lr=self.lr / 10,',
           'min_lr=self.lr / 100,', DEPTHTRAIN, 'formula'),
    Mutant('depthtrain: a fixed warm-up of 100 steps', 'lab/experiments/depthtrain.py',
           'warmup_iters=self.max_iters // 10,',
           'warmup_iters=100,', DEPTHTRAIN, 'formula'),
    Mutant("depthtrain: the summary's last-step norms are the first step's", 'lab/experiments/depthtrain.py',
           '"last_step_layer_grad_norms": steps[-1]["layer_grad_norms"] if steps else None,',
           '"last_step_layer_grad_norms": steps[0]["layer_grad_norms"] if steps else None,', DEPTHTRAIN, 'formula'),
    Mutant("depthtrain: one step said as '1 steps'", 'lab/experiments/depthtrain.py',
           'return f"{n} step{\'s\' * (n != 1)}"',
           'return f"{n} steps"', DEPTHTRAIN, 'names'),
]  # fmt: skip
