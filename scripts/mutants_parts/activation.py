"""Mutants of ``resgrad train --activation`` (src/resgrad/train/config.py, the train CLI): the
GELU a run names, what it records, and what a resume refuses."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mutants import Mutant  # noqa: E402

TESTS = ("tests/train/test_activation.py",)
C = "train/config.py"

MUTANTS = [
    Mutant("activation: the names swapped onto the other GELU", C,
           'ACTIVATION_NAMES = {"gelu_tanh": "gelu-tanh", "gelu": "gelu-erf"}',
           'ACTIVATION_NAMES = {"gelu_tanh": "gelu-erf", "gelu": "gelu-tanh"}', TESTS, "formula"),
    Mutant("activation: the model is built with the default GELU whatever the run says", C,
           "activation=ACTIVATION_NAMES[self.activation],", "", TESTS, "records"),
    Mutant("activation: a run from before the setting resumes as the exact GELU", C,
           '_BEFORE_RECORDED = {"shards": 1, "activation": "gelu_tanh"}',
           '_BEFORE_RECORDED = {"shards": 1, "activation": "gelu"}', TESTS, "records"),
    Mutant("activation: a resume may change it", C,
           'RESUMABLE = ("max_iters", "eval_interval", "eval_iters", "data", "out_dir", '
           '"resume", "keep_every")',
           'RESUMABLE = ("max_iters", "eval_interval", "eval_iters", "data", "out_dir", '
           '"resume", "keep_every", "activation")', TESTS, "refusal"),
    Mutant("activation: an unknown name is let through", C,
           "if self.activation not in ACTIVATION_NAMES:", "if False:", TESTS, "refusal"),
    Mutant("activation: a pretrained model's may be overridden", C,
           '"tokenizer", "activation")', '"tokenizer")', TESTS, "refusal"),
    Mutant("activation: the flag is not offered as a choice", "cli/train_cmds.py",
           '"--activation": tuple(ACTIVATION_NAMES)}', "}", TESTS, "refusal"),
]  # fmt: skip
