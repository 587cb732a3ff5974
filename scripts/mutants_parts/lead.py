import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mutants import Mutant  # noqa: E402

CLI_PRETRAINED = ("tests/cli/test_cli_pretrained.py",)
MUTANTS = [
    Mutant("paths_cmds: the text is encoded without the hint of its source", "cli/paths_cmds.py",
           "ids = encode_text(tok, text, args.text)  # (N,)",
           "ids = tok.encode(text)  # (N,)", CLI_PRETRAINED, "names"),
    Mutant("paths_cmds: --depth on a model is not refused", "cli/paths_cmds.py",
           '''        _common.refuse_with(args.argv, ("--depth", "--plain"), "a model",''',
           '''        _common.refuse_with(args.argv, ("--plain",), "a model",''',
           ("tests/cli/test_cli_paths.py",), "refusal"),
    Mutant("loop: init_from is loaded without the resolver", "train/loop.py",
           "        src = resolve_source(cfg.init_from, meta=cfg.meta, kinds=PRETRAINED, "
           "flag=\"init_from\")\n        model, tok = load_source(src, fits=fits)",
           "        from resgrad.train.pretrained import load_pretrained\n\n"
           "        model, tok = load_pretrained(cfg.init_from, meta=cfg.meta, fits=fits)",
           ("tests/train/test_pretrained.py",), "refusal"),
]  # fmt: skip
