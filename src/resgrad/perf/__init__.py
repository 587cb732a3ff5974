"""Performance: the malloc setting that keeps freed arrays for reuse (``heap``) and
the training-step timer behind ``resgrad bench`` and ``benchmarks/`` (``bench``).
"""
