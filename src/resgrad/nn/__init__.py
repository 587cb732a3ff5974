"""The model: the residual connection, every layer's forward/backward pair, the
transformer block in every residual scheme, and the GPT.

Floor 1 of resgrad: imports NumPy (and SciPy's ``erf``, for the exact GELU) and nothing
else of resgrad. Inside, each module
imports only the ones before it: ``residual`` -> ``layers`` -> ``blocks`` -> ``model``.
"""
