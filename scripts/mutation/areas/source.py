"""Mutants of the one SOURCE resolver (train/source.py) and the commands that call it."""

from mutation import Mutant

SOURCE = ("tests/train/test_source.py",)
SOURCE_CLI = ("tests/cli/test_cli_pretrained.py",)
F = "train/source.py"

_STEP0 = """    if meta is not None and "nanogpt" not in kinds:
        raise ValueError(f"--meta cannot be combined with {flag}: it is the vocabulary of a "
                         f"nanoGPT ckpt.pt, and {flag} takes {_expected(kinds)}")  # fmt: skip
    kind, path = _classify(name, kinds)
"""
_KIND = """    if kind not in kinds:
        raise ValueError(f"{flag} {name!r} is {KINDS[kind]}; {flag} takes {_expected(kinds)}")
"""
_FLAGS = """    if best and kind != "run":
        raise ValueError(f"--best picks a run directory's {BEST}; {name!r} is {KINDS[kind]}")
    if meta is not None and kind != "nanogpt":
        raise ValueError(f"--meta is the vocabulary of a nanoGPT ckpt.pt; {name!r} is "
                         f"{KINDS[kind]}: {_VOCABULARY[kind]}")  # fmt: skip
"""
_RUN = """    if kind == "run":
        path = _run_checkpoint(name, best)
"""
_KILLED = """    if not os.path.exists(last) and not os.path.exists(best_path):
        kept = kept_checkpoints(run_dir)"""
_BEST_MISSING = """    if best and not os.path.exists(best_path):
        raise ValueError(f"--best: {run_dir!r} is a resgrad run directory with no {BEST}; "
                         f"without --best, its {LAST} is read")  # fmt: skip
"""

MUTANTS = [
    # -- refusals: a flag meaningless for the kind found, a kind the caller does not take
    Mutant("source: --best accepted on a checkpoint file (silently ignored)", F,
           'if best and kind != "run":', 'if best and kind not in RESGRAD:', SOURCE, "refusal"),
    Mutant("source: --meta refused only for resgrad kinds (ignored for a HF dir, the lesson)", F,
           'if meta is not None and kind != "nanogpt":',
           "if meta is not None and kind in RESGRAD:", SOURCE, "refusal"),
    Mutant("source: --meta with a caller that takes no ckpt.pt goes unchecked", F,
           'if meta is not None and "nanogpt" not in kinds:', "if False:", SOURCE, "refusal"),
    Mutant("source: --best with a caller that takes no run directory goes unchecked", F,
           'if best and "run" not in kinds:', "if False:", SOURCE, "refusal"),
    Mutant("source: a kind the caller does not take is let through", F,
           "if kind not in kinds:", "if kind not in KINDS:", SOURCE, "refusal"),
    Mutant("source: a run killed before its first checkpoint is 'not a model'", F,
           "if any(os.path.exists(os.path.join(name, f)) for f in _RUN_FILES) or kept_checkpoints",
           "if kept_checkpoints", SOURCE, "refusal"),
    Mutant("source: a run is known by last.ckpt only (best.ckpt alone: not a run)", F,
           "for f in (LAST, BEST)):", "for f in (LAST,)):", SOURCE, "refusal"),
    Mutant("source: --best on a run without best.ckpt resolves to a missing file", F,
           _BEST_MISSING, "", SOURCE, "refusal"),
    Mutant("source: a --meta that is a directory or missing is not checked when resolving", F,
           "    if meta is not None:\n        check_meta_file(meta)\n", "", SOURCE, "refusal"),
    Mutant("source: a --meta directory is said not to exist", "train/pretrained.py",
           "    if os.path.isdir(meta):\n", "    if os.path.isdir(meta) and False:\n",
           SOURCE, "refusal"),
    Mutant("source: a renamed checkpoint (no .ckpt) is not recognised by its header", F,
           'if name.endswith(".ckpt") or _is_checkpoint_file(name):',
           'if name.endswith(".ckpt"):', SOURCE, "refusal"),
    Mutant("source: any file of 9 bytes or more is taken for a checkpoint", F,
           "return head.startswith(MAGIC) or (len(head) > 8 and FORMAT.encode() in head[8:])",
           "return head.startswith(MAGIC) or len(head) > 8", SOURCE, "refusal"),
    Mutant("source: the hub clause said where hub names are not taken", F,
           'hub = " and is not a hub model name" if "hub" in kinds else ""',
           'hub = " and is not a hub model name"', SOURCE, "names"),
    # -- ordering of the checks
    Mutant("source: the lesson only when no path is named 'lesson'", F,
           'if names_lesson(name) and ("lesson" in kinds or not os.path.exists(name)):',
           "if names_lesson(name) and not os.path.exists(name):", SOURCE, "ordering"),
    Mutant("source: the flags for the kind checked before the kind is allowed", F,
           _KIND + _FLAGS, _FLAGS + _KIND, SOURCE, "ordering"),
    Mutant("source: the run's checkpoint looked for before the flags are checked", F,
           _FLAGS + _RUN, _RUN + _FLAGS, SOURCE, "ordering"),
    Mutant("source: a flag no kind takes checked after the SOURCE is looked at", F,
           _STEP0,
           '''    kind, path = _classify(name, kinds)
    if meta is not None and "nanogpt" not in kinds:
        raise ValueError(f"--meta cannot be combined with {flag}: it is the vocabulary of a "
                         f"nanoGPT ckpt.pt, and {flag} takes {_expected(kinds)}")  # fmt: skip
''', SOURCE, "ordering"),
    Mutant("source: a killed run with --best is said to lack best.ckpt", F,
           _KILLED, _BEST_MISSING + _KILLED, SOURCE, "ordering"),
    Mutant("source: the first kept checkpoint named, not the last", F,
           "os.path.basename(kept[-1][1])", "os.path.basename(kept[0][1])", SOURCE, "ordering"),
    # -- names: what is loaded, what is said
    Mutant("source: --best still loads last.ckpt", F,
           "return best_path if best else last", "return last", SOURCE, "names"),
    Mutant("source: the loader reads the SOURCE string, not the checkpoint found", F,
           "model, tok, _ = load_model(src.path)", "model, tok, _ = load_model(src.name)",
           SOURCE, "names"),
    Mutant("source: the killed run's command names the directory's base name", F,
           "--out-dir {shlex.quote(run_dir)}", "--out-dir {os.path.basename(run_dir)}",
           SOURCE, "names"),
    Mutant("source: a checkpoint's shape is not shown to the memory check", F,
           "        if fits is not None:\n            fits(model.cfg)\n", "", SOURCE, "refusal"),
    Mutant("source: a hub name looked up in the cache under its short name", F,
           'repo = f"openai-community/{name}" if name in HUB_MODELS else name',
           "repo = name", SOURCE, "aliases"),
    # -- the commands pass their flags to the resolver
    Mutant("source: sample --out-dir takes a Hugging Face directory", "cli/train_cmds.py",
           "kinds=RESGRAD if run else MODELS", "kinds=MODELS", SOURCE_CLI, "refusal"),
    Mutant("source: train --init-from is not resolved (a run dir: 'no config.json')",
           "cli/train_cmds.py", "if not args.resume:  # a resumed run reads its own checkpoint",
           "if False:  # a resumed run reads its own checkpoint", SOURCE_CLI, "refusal"),
    Mutant("source: flow --from-pretrained takes only pretrained kinds", "cli/flow_cmds.py",
           "                       meta=args.meta, kinds=MODELS, flag=\"--from-pretrained\")",
           "                       meta=args.meta, kinds=(\"hf-dir\", \"hub\", \"nanogpt\"), "
           "flag=\"--from-pretrained\")",
           SOURCE_CLI, "refusal"),
]  # fmt: skip
