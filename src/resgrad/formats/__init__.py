"""Files: atomic writes (``atomic``), CSV/JSON rows (``records``) and training
checkpoints (``checkpoint``). Imports only :mod:`resgrad.nn` and the floors below.
"""
