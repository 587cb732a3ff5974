"""Mutants of ``resgrad train --activation`` (src/resgrad/train/config.py, the train CLI): the
GELU a run names, what it records, and what a resume refuses."""

# ruff: noqa: E501  (each mutant quotes its source text verbatim)

from mutation import Mutant

TESTS = ("tests/train/test_activation.py",)
C = "train/config.py"

MUTANTS = [
    Mutant("activation: the names swapped onto the other GELU", C,
           'ACTIVATION_NAMES = {"gelu_tanh": "gelu-tanh", "gelu": "gelu-erf"}',
           'ACTIVATION_NAMES = {"gelu_tanh": "gelu-erf", "gelu": "gelu-tanh"}', TESTS, "formula"),
    Mutant("activation: a run from before the setting resumes as the exact GELU", C,
           '_BEFORE_RECORDED = {"shards": 1, "activation": "gelu_tanh"}',
           '_BEFORE_RECORDED = {"shards": 1, "activation": "gelu"}', TESTS, "records"),
    Mutant("activation: a resume may change it", C,
           'RESUMABLE = ("max_iters", "eval_interval", "eval_iters", "data", "out_dir", '
           '"resume", "keep_every")',
           'RESUMABLE = ("max_iters", "eval_interval", "eval_iters", "data", "out_dir", '
           '"resume", "keep_every", "activation")', TESTS, "refusal"),
    Mutant("activation: an unknown name is let through", C,
           "if not isinstance(self.activation, str) or self.activation not in ACTIVATION_NAMES:",
           "if False:", TESTS, "refusal"),
    Mutant("activation: a pretrained model's may be overridden", C,
           '"tokenizer", "activation",\n', '"tokenizer",\n', TESTS, "refusal"),
    Mutant("activation: the flag is not offered as a choice", "cli/train_cmds.py",
           '"--activation": tuple(ACTIVATION_NAMES)}', "}", TESTS, "refusal"),
]  # fmt: skip

# the float32 exact GELU kernel (src/resgrad/nn/kernels.py)
K = "nn/kernels.py"
KT = ("tests/nn/test_kernels.py",)
MUTANTS += [
    Mutant("kernels: gelu_erf clamps erf's argument at 3, not 4", K,
           "_F32(0.7071067811865476), _F32(0.5), _F32(1.0), _F32(4.0)",
           "_F32(0.7071067811865476), _F32(0.5), _F32(1.0), _F32(3.0)", KT, "bounds"),
    Mutant("kernels: gelu_erf with the erf of x, not of x / sqrt(2)", K,
           "u = xi * _SQRT1_2  # u = x / sqrt(2)", "u = xi  # u = x / sqrt(2)", KT, "formula"),
    Mutant("kernels: gelu_erf's numerator one term short", K,
           "p = p * u2 + _P1", "p = p * u2", KT, "formula"),
    Mutant("kernels: gelu_erf runs on float64 too", K,
           "    if x.dtype != np.float32:\n        return None\n    fn = _kernel(\"gelu_erf32\", x)",
           "    fn = _kernel(\"gelu_erf32\", x)", KT, "refusal"),
    Mutant("kernels: gelu_erf returns (cdf, out)", K,
           "    return out, cdf\n", "    return cdf, out\n", KT, "ordering"),
]  # fmt: skip
