"""Training: the corpus and its batches (``data``), AdamW and the schedule
(``optim``), the training loop (``loop``) and KV-cache sampling (``sample``).
"""
