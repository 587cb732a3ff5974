"""Performance: the malloc setting that keeps freed arrays for reuse (``heap``), the
default BLAS thread count that leaves busy cores alone (``threads``), the training-step
timer behind ``resgrad bench`` and ``benchmarks/`` (``bench``), and the memory estimates
checked before a command allocates (``memory``).
"""
