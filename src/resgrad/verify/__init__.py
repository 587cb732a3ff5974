"""The proofs: the float64 finite-difference gradient checker (``gradcheck``) and
``resgrad check``'s checks of every layer, block scheme and the whole GPT
(``selfcheck``). Imports only :mod:`resgrad.nn`.
"""
