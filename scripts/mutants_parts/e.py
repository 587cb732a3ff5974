"""Mutants of helper E: formats/lock.py, records.py, checkpoint.py; train/data.py,
sample.py; lab/lesson.py, explore.py. Tuples: (name, file, old, new, tests)."""

LOCK = ("tests/formats/test_lock.py",)
RECORDS = ("tests/formats/test_records.py",)
CKPT = ("tests/formats/test_checkpoint.py",)
DATA = ("tests/train/test_data.py",)
SAMPLE = ("tests/train/test_sample.py",)
LESSON = ("tests/lab/test_lesson.py",)
EXPLORE = ("tests/lab/test_explore.py",)

MUTANTS = [
    # -- formats/lock.py
    ("lock: a directory that existed before is taken away", "formats/lock.py",
     "new = not os.path.isdir(directory)", "new = True", LOCK),
    ("lock: a non-empty hidden file counts as bookkeeping", "formats/lock.py",
     'empty_hidden = name.startswith(".") and os.path.getsize(path) == 0',
     'empty_hidden = name.startswith(".")', LOCK),
    ("lock: cleanup removes files under a lock somebody holds", "formats/lock.py",
     "            except filelock.Timeout:  # somebody holds it: leave everything\n"
     "                for held in locks:\n"
     "                    held.release()\n"
     "                return",
     "            except filelock.Timeout:  # somebody holds it: leave everything\n"
     "                continue", LOCK),
    ("lock: the info records argv[0] verbatim, not the program", "formats/lock.py",
     '"command": " ".join([_program(), *sys.argv[1:]])[:200],',
     '"command": " ".join(sys.argv)[:200],', LOCK),
    ("lock: the info records CPU time as the start time", "formats/lock.py",
     '"started": time.time(),', '"started": time.process_time(),', LOCK),
    # -- formats/records.py
    ("records: zero written as an empty cell", "formats/records.py",
     "    if v is None:\n        return \"\"", "    if not v:\n        return \"\"", RECORDS),
    ("records: floats rounded to 6 digits", "formats/records.py",
     "return repr(float(v)) if isinstance(v, float) else v",
     'return f"{v:.6g}" if isinstance(v, float) else v', RECORDS),
    ("records: JSON drops the meta fields", "formats/records.py",
     'data = {**meta, "rows": data}', 'data = {"rows": data}', RECORDS),
    ("records: JSON rows keep keys outside the fields", "formats/records.py",
     "data: object = [{k: r[k] for k in fields} for r in rows]",
     "data: object = [dict(r) for r in rows]", RECORDS),
    ("records: CSV without its header", "formats/records.py",
     "    w.writerow(fields)\n", "", RECORDS),
    # -- formats/checkpoint.py (two more in scripts/mutants.py)
    ("checkpoint: saved in place, not atomically", "formats/checkpoint.py",
     "        atomic_write_bytes(p, data)",
     "        with open(p, \"wb\") as f:\n            f.write(data)", CKPT),
    ("checkpoint: temporary and rename, but never fsynced", "formats/checkpoint.py",
     "        atomic_write_bytes(p, data)",
     "        with open(f\"{os.fspath(p)}.tmp\", \"wb\") as f:\n"
     "            f.write(data)\n"
     "        os.replace(f\"{os.fspath(p)}.tmp\", p)", CKPT),
    ("checkpoint: the tokenizer record is not written", "formats/checkpoint.py",
     '**({} if self.tokenizer is None else {"tokenizer": self.tokenizer}),', "", CKPT),
    ("checkpoint: the metadata's format version is not checked", "formats/checkpoint.py",
     'if missing or meta["format"] != version:', "if missing:", CKPT),
    # -- train/data.py
    ("data: min_length lets the val split hold only block_size", "train/data.py",
     "if n_val >= block_size + 1 and", "if n_val >= block_size and", DATA),
    ("data: unknown chars: first position in sorted order", "train/data.py",
     "pos = min(text.index(c) for c in missing)", "pos = text.index(missing[0])", DATA),
    ("data: decode accepts negative ids", "train/data.py",
     "bad = (ids < 0) | (ids >= self.vocab_size)", "bad = ids >= self.vocab_size", DATA),
    ("data: a text over the size limit is cut silently", "train/data.py",
     "raw = f.read(MAX_DATA_BYTES + 1)", "raw = f.read(MAX_DATA_BYTES)", DATA),
    ("data: a pipe or directory is not refused up front", "train/data.py",
     "if not stat.S_ISREG(os.fstat(fd).st_mode):", "if False:", DATA),
    # -- train/sample.py
    ("sample: a long prompt is prefilled uncropped", "train/sample.py",
     "logits = forward_step(model, idx[:, -bs:], cache)[:, -1]",
     "logits = forward_step(model, idx, cache)[:, -1]", SAMPLE),
    ("sample: a long prompt keeps its first block_size tokens", "train/sample.py",
     "logits = forward_step(model, idx[:, -bs:], cache)[:, -1]",
     "logits = forward_step(model, idx[:, :bs], cache)[:, -1]", SAMPLE),
    ("sample: the context limit is off by one", "train/sample.py",
     "if t0 + T > cfg.block_size:", "if t0 + T > cfg.block_size + 1:", SAMPLE),
    ("sample: the stream never sends the start text", "train/sample.py",
     "        on_text(start)\n", "", SAMPLE),
    ("sample: a float64 checkpoint is loaded as float32", "train/sample.py",
     "dtype = next(iter(ckpt.params.values())).dtype if ckpt.params else np.float32",
     "dtype = np.float32", SAMPLE),
    ("sample: --best on a checkpoint file is ignored", "train/sample.py",
     "    elif best:\n        raise ValueError(",
     "    elif best and False:\n        raise ValueError(", SAMPLE),
    # -- lab/lesson.py
    ("lesson: dW forgets the tanh derivative", "lab/lesson.py",
     "dW = x.T @ dz  # (C, B) @ (B, C) -> (C, C)", "dW = x.T @ dout  # (C, B) @ (B, C) -> (C, C)",
     LESSON),
    ("lesson: activation norms of f(x), not of the stream", "lab/lesson.py",
     "        act_norms.append(float(np.linalg.norm(x)))",
     "        act_norms.append(float(np.linalg.norm(f)))", LESSON),
    ("lesson: weight-gradient norms in backward order", "lab/lesson.py",
     "weight_grad_norms=tuple(reversed(dW_norms)),", "weight_grad_norms=tuple(dW_norms),", LESSON),
    ("lesson: gradcheck accepts eps = 0", "lab/lesson.py",
     "if self.eps <= 0:", "if self.eps < 0:", LESSON),
    ("lesson: seed bound admits 2**32", "lab/lesson.py",
     "not 0 <= v < 2**32:", "not 0 <= v <= 2**32:", LESSON),
    ("lesson: a bank too short for the depth is not refused", "lab/lesson.py",
     "    if len(Ws) < N:\n", "    if len(Ws) < N - 1:\n", LESSON),
    # -- lab/explore.py
    ("explore: gain 1 records read 'gpt2 x1'", "lab/explore.py",
     "if cfg.is_lesson or gain == 1.0:", "if cfg.is_lesson:", EXPLORE),
    ("explore: gain 0 refused", "lab/explore.py",
     "if not math.isfinite(value) or value < 0:", "if not math.isfinite(value) or value <= 0:",
     EXPLORE),
    ("explore: overflow note counts every quantity's layers", "lab/explore.py",
     "if r.quantity == quantity and not all(math.isfinite(v) for v in vals):",
     "if not all(math.isfinite(v) for v in vals):", EXPLORE),
    ("explore: one seed still claims a min..max band", "lab/explore.py",
     '(", band = min..max" if k > 1 else "")', '(", band = min..max" if k >= 1 else "")',
     EXPLORE),
]  # fmt: skip
