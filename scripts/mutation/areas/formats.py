"""Mutants of the file readers: formats/hf.py (config.json, export), formats/nanogpt.py
(ckpt.pt, meta.pkl) and train/pretrained.py's meta.pkl search."""

# ruff: noqa: E501  (each mutant quotes its source text verbatim)

from mutation import HF, HF_CLI_PRETRAINED, HF_NANOGPT, NANOGPT, Mutant

BOUNDS = ("tests/formats/test_formats_bounds.py",)
META = ("tests/train/test_pretrained_meta.py",)
H = "formats/hf.py"
N = "formats/nanogpt.py"
P = "train/pretrained.py"

# read_nanogpt_ckpt: model_args checked, then the state dict's tensors converted
_CHECK_ARGS = (
    '    cfg = nanogpt_config(ckpt["model_args"], where=name)  # before any tensor is converted\n'
)
_CONVERT = """    want = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32
    state = {}
    for k, v in ckpt["model"].items():
        if type(k) is not str:
            raise ValueError(f"{name!r}: state dict key {k!r} is a {type(k).__name__}; "
                             "expected parameter names (strings)")  # fmt: skip
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"{name!r}: state dict entry {k!r} is not a tensor")
        if not v.is_floating_point():  # cast, an int8 weight would be all zeros: refuse it
            raise ValueError(
                f"{name!r}: tensor {k!r} has dtype {v.dtype}; expected floating-point weights "
                "(float16, bfloat16, float32, float64)"
            )
        state[k] = v.detach().to("cpu", want).numpy()
"""

MUTANTS = [
    # -- formats/hf.py (15)
    Mutant('hf: activation_function "gelu" read as the tanh GELU', 'formats/hf.py',
           '"gelu": "gelu-erf",  # the exact form',
           '"gelu": "gelu-tanh",  # the exact form', HF, 'aliases'),
    Mutant('hf: export writes "gelu_new" for the exact GELU', 'formats/hf.py',
           '_HF_ACTIVATION = {"gelu-tanh": "gelu_new", "gelu-erf": "gelu"}',
           '_HF_ACTIVATION = {"gelu-tanh": "gelu_new", "gelu-erf": "gelu_new"}', HF, 'aliases'),
    Mutant("hf: export writes GPT-2's epsilon, not the model's", 'formats/hf.py',
           '"layer_norm_epsilon": cfg.ln_eps,',
           '"layer_norm_epsilon": 1e-5,', HF, 'records'),
    Mutant('hf: export swaps n_layer and n_head', 'formats/hf.py',
           '"n_layer": cfg.n_layer,\n        "n_head": cfg.n_head,',
           '"n_layer": cfg.n_head,\n        "n_head": cfg.n_layer,', HF, 'records'),
    Mutant('hf: the old alias n_ctx is read before n_positions', 'formats/hf.py',
           '"n_positions", "n_ctx", "max_position_embeddings"',
           '"n_ctx", "n_positions", "max_position_embeddings"', HF, 'aliases'),
    Mutant("hf: nanoGPT's model_args mapped with GPT-2's tanh GELU", 'formats/hf.py',
           'activation="gelu-erf",  # nanoGPT\'s MLP: nn.GELU(), the exact form',
           'activation="gelu-tanh",  # nanoGPT\'s MLP: nn.GELU(), the exact form', HF_NANOGPT, 'aliases'),
    Mutant('hf: a boolean size (true) is read as the integer 1', 'formats/hf.py',
           'if isinstance(v, bool) or not isinstance(v, int) or v < 1:',
           'if not isinstance(v, int) or v < 1:', HF_CLI_PRETRAINED, 'refusal'),
    Mutant('hf: a size of 0 is accepted (bound off by one)', 'formats/hf.py',
           'if isinstance(v, bool) or not isinstance(v, int) or v < 1:',
           'if isinstance(v, bool) or not isinstance(v, int) or v < 0:', HF, 'refusal'),
    Mutant('hf: a weight_map that is not an object is not refused', 'formats/hf.py',
           '    if not isinstance(wm, dict):\n        raise',
           '    if wm is None:\n        raise', HF_CLI_PRETRAINED, 'refusal'),
    Mutant('hf: a weight_map entry may be a path out of the directory', 'formats/hf.py',
           'if not plain or os.path.basename(shard) != shard:',
           'if not plain:', HF, 'refusal'),
    Mutant("hf: a shard's tensors the index does not map to it are taken", 'formats/hf.py',
           '            if stray:\n',
           '            if False:\n', HF, 'refusal'),
    Mutant('hf: only int8 weights are refused, other integer types are cast', 'formats/hf.py',
           'if st in _ST_DTYPES and st not in _FLOATS and not _is_buffer(name):',
           'if st == "I8" and not _is_buffer(name):', HF_CLI_PRETRAINED, 'refusal'),
    Mutant('hf: weights are checked finite before the cast to float32', 'formats/hf.py',
           '        if not np.isfinite(params[ours]).all():  # NaN weights',
           '        if not np.isfinite(a).all():  # NaN weights', HF, 'ordering'),
    Mutant("hf: the config is not held against the weights' size before allocating", 'formats/hf.py',
           '    if weights is not None:\n        _refuse_larger(cfg, weights[1], where, weights[0])\n',
           '', HF_CLI_PRETRAINED, 'refusal'),
    Mutant('hf: export replaces a directory holding a model without force', 'formats/hf.py',
           '    if not force:\n',
           '    if False:\n', HF_CLI_PRETRAINED, 'refusal'),
    # -- formats/nanogpt.py (50)
    Mutant('nanogpt: a float64 load reads the tensors through float32', 'formats/nanogpt.py',
           'want = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32',
           'want = torch.float32', NANOGPT, 'records'),
    Mutant('nanogpt: only model_args is checked to be a dict, not the state dict', 'formats/nanogpt.py',
           'for field in ("model", "model_args"):',
           'for field in ("model_args",):', NANOGPT, 'refusal'),
    Mutant('nanogpt: integer and bool tensors are cast, not refused', 'formats/nanogpt.py',
           'if not v.is_floating_point():  # cast, an int8 weight would be all zeros: refuse it',
           'if False:  # cast, an int8 weight would be all zeros: refuse it', NANOGPT, 'refusal'),
    Mutant("nanogpt: meta.pkl's unpickler looks globals up instead of refusing them", 'formats/nanogpt.py',
           '        raise _Refused(f"it names the global {module}.{name}")',
           '        return super().find_class(module, name)', NANOGPT, 'refusal'),
    Mutant("nanogpt: meta.pkl's walk uses isinstance, so True passes as an int", 'formats/nanogpt.py',
           'if type(x) not in _PLAIN:',
           'if not isinstance(x, _PLAIN):', NANOGPT, 'refusal'),
    Mutant('nanogpt: stoi checked for its characters, not their ids', 'formats/nanogpt.py',
           'stoi != {c: i for i, c in enumerate(chars)}',
           'set(stoi) != set(chars)', NANOGPT, 'refusal'),
    # -- config.json: types and bounds
    Mutant("hf: an integral float size (n_layer 2.0) is read as the int", H,
           "        v = cfg[k]\n        if isinstance(v, bool) or not isinstance(v, int) or v < 1:",
           "        v = int(cfg[k]) if isinstance(cfg[k], float) and cfg[k].is_integer() "
           "else cfg[k]\n"
           "        cfg = {**cfg, k: v}\n"
           "        if isinstance(v, bool) or not isinstance(v, int) or v < 1:", HF, "refusal"),
    Mutant("hf: layer_norm_epsilon has no upper bound (1e308 read)", H,
           "not EPS_MIN <= v <= EPS_MAX:", "not EPS_MIN <= v < math.inf:", BOUNDS, "bounds"),
    Mutant("hf: layer_norm_epsilon's least is float64's smallest normal", H,
           "EPS_MIN, EPS_MAX = float(np.finfo(np.float32).tiny), 0.1",
           "EPS_MIN, EPS_MAX = float(np.finfo(np.float64).tiny), 0.1", BOUNDS, "bounds"),
    Mutant("hf: layer_norm_epsilon up to 1", H,
           "EPS_MIN, EPS_MAX = float(np.finfo(np.float32).tiny), 0.1",
           "EPS_MIN, EPS_MAX = float(np.finfo(np.float32).tiny), 1.0", BOUNDS, "bounds"),
    Mutant("hf: the other float fields (dropouts, initializer_range) are not checked", H,
           "    _check_floats(cfg, where)\n", "", HF, "refusal"),
    Mutant("hf: a dropout field's type is not checked (\"0.1\" passes)", H,
           "        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v < hi:",
           "        if isinstance(v, (int, float)) and not lo <= v < hi:", HF, "refusal"),
    Mutant("hf: n_inner compared by value (256.0 and true pass)", H,
           "inner is None or (type(inner) is int and inner == 4 * C)",
           "inner in (None, 4 * C)", HF, "refusal"),
    Mutant("hf: n_inner's exact value off by one allowed", H,
           "inner is None or (type(inner) is int and inner == 4 * C)",
           "inner is None or (type(inner) is int and abs(inner - 4 * C) <= 1)", BOUNDS, "bounds"),
    # -- config.json: aliases
    Mutant("hf: aliases are not read (only n_embd, n_layer, ...)", H,
           "given = [k for k in keys if k in cfg]", "given = [k for k in keys[:1] if k in cfg]",
           HF, "aliases"),
    Mutant("hf: a field and its alias may disagree (the first wins)", H,
           "        if cfg[k] != cfg[first]:", "        if False:", HF, "aliases"),
    Mutant("hf: only the first of a field's names is checked for type and range", H,
           "    for k in given:\n        v = cfg[k]", "    for k in given[:1]:\n        v = cfg[k]",
           BOUNDS, "aliases"),
    Mutant("hf: the alias wins over the field, as transformers reads it, unchecked", H,
           "    first = given[0]\n    for k in given[1:]:",
           "    first = given[-1]\n    for k in given[:0]:", HF, "aliases"),
    Mutant("hf: the _orig_mod. prefix is stripped after transformer. (compiled keys kept)", H,
           'k = k.removeprefix("_orig_mod.").removeprefix("transformer.")',
           'k = k.removeprefix("transformer.").removeprefix("_orig_mod.")', HF, "aliases"),
    Mutant("hf: a mask buffer is recognised before its prefixes are stripped", H,
           '        k = k.removeprefix("_orig_mod.").removeprefix("transformer.")\n'
           '        if _BUFFER.fullmatch(k):\n            continue',
           '        if _BUFFER.fullmatch(k):\n            continue\n'
           '        k = k.removeprefix("_orig_mod.").removeprefix("transformer.")', NANOGPT,
           "aliases"),
    # -- export's config.json: every field from the model
    Mutant("hf: export writes GPT-2's resid_pdrop 0.1, not the model's dropout", H,
           '"resid_pdrop": cfg.dropout,', '"resid_pdrop": 0.1,', HF, "records"),
    Mutant("hf: export writes embd_pdrop 0", H,
           '"embd_pdrop": cfg.dropout,', '"embd_pdrop": 0.0,', HF, "records"),
    Mutant("hf: export leaves attn_pdrop to transformers' default", H,
           '        "attn_pdrop": cfg.dropout,\n', "", HF, "records"),
    Mutant("hf: export names the context n_ctx (transformers reads n_positions 1024)", H,
           '"n_positions": cfg.block_size,', '"n_ctx": cfg.block_size,', HF, "records"),
    Mutant("hf: export writes an epsilon load would refuse", H,
           "    if not EPS_MIN <= cfg.ln_eps <= EPS_MAX:  # what load_hf reads back",
           "    if False:  # what load_hf reads back", HF, "refusal"),
    # -- nanoGPT's model_args
    Mutant("nanogpt: model_args sizes cast with int() (\"2\", True, 2.7 pass)", H,
           "        if type(v) is not int or v < 1:  # type(): True is no size, nor 2.0, "
           "nor \"2\"\n"
           '            raise ValueError(f"{where}: model_args {k} is {_arg(v)}; expected an '
           'integer >= 1")\n        sizes[k] = v\n',
           "        sizes[k] = int(v)\n", NANOGPT, "refusal"),
    Mutant("nanogpt: model_args sizes checked with isinstance (True is 1)", H,
           "if type(v) is not int or v < 1:  # type(): True is no size",
           "if not isinstance(v, int) or v < 1:  # type(): True is no size", NANOGPT, "refusal"),
    Mutant("nanogpt: model_args sizes of 0 pass", H,
           "if type(v) is not int or v < 1:  # type(): True is no size",
           "if type(v) is not int or v < 0:  # type(): True is no size", BOUNDS, "bounds"),
    Mutant("nanogpt: bias read with bool() (\"False\" is True)", H,
           '    bias = model_args.get("bias", True)  # nanoGPT',
           '    bias = bool(model_args.get("bias", True))  # nanoGPT', NANOGPT, "refusal"),
    Mutant("nanogpt: model_args dropout's range not checked", H,
           "if type(drop) not in (int, float) or not 0.0 <= drop < 1.0:",
           "if type(drop) not in (int, float):", NANOGPT, "refusal"),
    Mutant("nanogpt: a key nanoGPT does not have is dropped, not refused", H,
           "unknown = [k for k in model_args if k not in NANOGPT_ARGS]", "unknown = []",
           NANOGPT, "refusal"),
    Mutant("nanogpt: model_args checked only after every tensor is converted", N,
           _CHECK_ARGS + _CONVERT, _CONVERT + _CHECK_ARGS, NANOGPT, "ordering"),
    # -- ckpt.pt: torch's errors
    Mutant("nanogpt: a damaged .pt said to be refused, as before", N,
           'f"{name!r} is not a readable PyTorch checkpoint (truncated or damaged: {why}); '
           'nothing "',
           'f"refused to load {name!r}: not a plain PyTorch checkpoint (truncated or damaged: '
           '{why}); nothing "', NANOGPT, "refusal"),
    Mutant("nanogpt: torch's first line relayed, its weights_only=False advice with it", N,
           "    why = next((ln for ln in lines if not any(a in ln for a in _ADVICE)), "
           "type(e).__name__)",
           "    why = lines[0] if lines else type(e).__name__", NANOGPT, "refusal"),
    Mutant("nanogpt: miniz's explanation kept in the one line", N,
           '    why = why.split(". ")[0].rstrip(".")', "    why = why", NANOGPT, "refusal"),
    Mutant("nanogpt: a missing .pt said to be damaged", N,
           "    except (FileNotFoundError, PermissionError, IsADirectoryError):\n"
           "        raise  # said",
           "    except ():\n        raise  # said", NANOGPT, "refusal"),
    Mutant("nanogpt: a state dict key that is not a string is not refused", N,
           "        if type(k) is not str:\n", "        if False:\n", NANOGPT, "refusal"),
    # -- meta.pkl
    Mutant("nanogpt: meta.pkl's walk never checks dict keys", N,
           "            stack.extend(x.keys())\n", "", NANOGPT, "refusal"),
    Mutant("nanogpt: stoi is optional", N,
           'for key in ("itos", "stoi"):', 'for key in ("itos",):', NANOGPT, "refusal"),
    Mutant("nanogpt: itos ids compared by value (True and 1.0 are ids)", N,
           "bad = [k for k in itos if type(k) is not int or not 0 <= k < n]",
           "bad = [k for k in itos if not 0 <= k < n]", NANOGPT, "refusal"),
    Mutant("nanogpt: stoi's keys and ids not checked for str and int", N,
           "odd = [(c, i) for c, i in stoi.items() if type(c) is not str or type(i) is not int]",
           "odd = []", NANOGPT, "refusal"),
    Mutant("nanogpt: vocab_size compared by value (True is 1)", N,
           "if size is not None and (type(size) is not int or size != n):",
           "if size is not None and size != n:", NANOGPT, "refusal"),
    # -- the meta.pkl search and the tokenizer beside a ckpt.pt
    Mutant("pretrained: a dataset of '..' escapes data/", P,
           'plain = isinstance(dataset, str) and dataset not in ("", ".", "..")',
           'plain = isinstance(dataset, str) and dataset not in ("", ".")', META, "refusal"),
    Mutant("pretrained: a dataset holding a slash is followed", P,
           'if not plain or any(c in dataset for c in "/\\\\\\0"):',
           'if not plain or "\\0" in dataset:', META, "refusal"),
    Mutant("pretrained: a dataset outside data/ is skipped silently, not named", P,
           "        raise ValueError(\n"
           "            f\"{os.fspath(ckpt_path)!r}: its config's dataset",
           "        return None\n        raise ValueError(\n"
           "            f\"{os.fspath(ckpt_path)!r}: its config's dataset", META, "refusal"),
    Mutant("pretrained: meta.pkl beside the checkpoint searched before the working directory", P,
           "for base in (os.getcwd(), here, os.path.dirname(here)):",
           "for base in (here, os.getcwd(), os.path.dirname(here)):", META, "ordering"),
    Mutant("pretrained: meta.pkl above the checkpoint searched before its own directory", P,
           "for base in (os.getcwd(), here, os.path.dirname(here)):",
           "for base in (os.getcwd(), os.path.dirname(here), here):", META, "ordering"),
    Mutant("pretrained: the checkpoint's directory is the .pt path itself", P,
           "here = os.path.dirname(os.path.abspath(os.fspath(ckpt_path)))",
           "here = os.path.abspath(os.fspath(ckpt_path))", META, "names"),
    Mutant("pretrained: the tokenizer is looked for at the .pt path, not beside it", P,
           "tok = load_tokenizer_dir(os.path.dirname(os.path.abspath(name)))",
           "tok = load_tokenizer_dir(os.path.abspath(name))", META, "names"),
    Mutant("pretrained: the tokenizer is looked for in the working directory", P,
           "tok = load_tokenizer_dir(os.path.dirname(os.path.abspath(name)))",
           "tok = load_tokenizer_dir(os.getcwd())", META, "names"),
]  # fmt: skip
