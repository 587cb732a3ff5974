"""resgrad: residual connections and gradient flow through a GPT, in NumPy.

Every layer has an explicit forward pass and a hand-derived backward pass, and
each backward is proven by float64 finite differences. The residual
connection ``out = x + sublayer(x)``, backward ``dx = dout + df``, is at the
centre; see :mod:`resgrad.residual`.
"""

from resgrad.gradcheck import GradCheckReport, check_gradients
from resgrad.residual import Residual, residual, residual_backward

__version__ = "0.1.0"

__all__ = [
    "GradCheckReport",
    "Residual",
    "check_gradients",
    "residual",
    "residual_backward",
]
