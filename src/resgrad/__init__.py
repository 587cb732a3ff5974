"""resgrad: residual connections and gradient flow through a GPT, in NumPy.

Every layer has an explicit forward pass and a hand-derived backward pass, and
each backward is proven by float64 finite differences. The residual
connection ``out = x + sublayer(x)``, backward ``dx = dout + df``, is at the
centre; see :mod:`resgrad.nn.residual`.

The packages are the architecture, bottom up (a package imports only from the
ones above it in this list):

- :mod:`resgrad.nn`: the residual connection, the layers, the blocks, the GPT;
- :mod:`resgrad.verify`: the finite-difference checker and ``resgrad check``;
- :mod:`resgrad.formats`: atomic files, CSV/JSON records, checkpoints;
- :mod:`resgrad.plots`: matplotlib figures;
- :mod:`resgrad.train`: data, AdamW, the training loop, sampling;
- :mod:`resgrad.lab`: the lesson, gradient-flow profiles, sweeps;
- :mod:`resgrad.perf`: the heap setting and the step timer;
- :mod:`resgrad.cli`: the ``resgrad`` command, flags only.

The names below are the ones used most; everything else is imported from its
module, e.g. ``from resgrad.lab.flow import FlowConfig, measure``.
"""

from resgrad.nn.model import GPT, INITS, VARIANTS, GPTConfig
from resgrad.nn.residual import Residual, residual, residual_backward
from resgrad.verify.gradcheck import GradCheckReport, check_gradients

__version__ = "0.1.0"

__all__ = [
    "GPT",
    "INITS",
    "VARIANTS",
    "GPTConfig",
    "GradCheckReport",
    "Residual",
    "check_gradients",
    "residual",
    "residual_backward",
]
