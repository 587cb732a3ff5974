"""The lab: the lesson's tanh stack (``lesson``) and the studies of a model, a subpackage
each: what every study shares (``study``: its cost and budget, the text windows, the runs it
compares, the protocol that follows it through checkpoints and across runs, its refusals),
per-layer gradient flow (``flow``), the gradient split by path length (``paths``), blocks
deleted at test time (``lesion``), training experiments and grids on cores or a cluster
(``experiments``), and the equal-loss study that sets paths beside lesions (``robustness``).
"""
