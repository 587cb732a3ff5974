"""The gradient-flow lab: the lesson's tanh stack (``lesson``), per-layer profiles of
any residual scheme (``flow``) and grids of them on local cores or a cluster (``sweep``).
"""
