"""Mutants of the training plots (src/resgrad/plots.py): the trailing mean and the
loss curves."""

from mutation import PLOTS, Mutant

MUTANTS = [
    # -- plots.py (3)
    Mutant('plots: the trailing mean divides by the full window from the start', 'plots.py',
           'return (c[i] - c[lo]) / (i - lo)  # (N,)',
           'return (c[i] - c[lo]) / n  # (N,)', PLOTS, 'statistics'),
    Mutant('plots: a 1-step loss curve gets no marker', 'plots.py',
           'point = {"marker": "o", "ms": 4} if len(x) == 1 else {}',
           'point = {"marker": "o", "ms": 4} if len(x) == 0 else {}', PLOTS, 'records'),
    Mutant("plots: the val curve draws the evaluations' train loss", 'plots.py',
           'ax.plot(ex, [r["val_loss"] for r in evals]',
           'ax.plot(ex, [r["train_loss"] for r in evals]', PLOTS, 'records'),
]  # fmt: skip
