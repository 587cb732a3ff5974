"""``resgrad paths``: the gradient split by path length, on a trained model or the lesson."""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from resgrad.cli import _common
from resgrad.lab import paths
from resgrad.lab.lesson import StackConfig
from resgrad.perf import memory

FORMATS = ("table", "json", "csv")
ROW_KEYS = list(paths.PathRow._fields)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "paths",
        help="split the gradient at the embeddings by path length k (branches passed)",
        description="Split dL/dx_i at every block boundary, exactly, by the number k of "
        "sublayer branches (attention or MLP) a path passes between the loss and x_i; k = 0 "
        "is the identity highway. SOURCE is a resgrad run directory or checkpoint file, a "
        "Hugging Face GPT-2 directory or hub name, a nanoGPT ckpt.pt, or 'lesson' (the "
        "lesson's tanh stack). The table is for x_0, the embeddings' output: mean and std "
        "over --seeds batches.",
    )
    p.add_argument("source", metavar="SOURCE", help="run directory, checkpoint, model, or lesson")
    p.add_argument("--text", metavar="FILE", help="UTF-8 text (default: the built-in corpus)")
    p.add_argument("--meta", metavar="PATH", help="nanoGPT's meta.pkl for a ckpt.pt")
    p.add_argument("--best", action="store_true", help="a run directory's best.ckpt")
    p.add_argument("--seq", type=_common.positive_int, default=64, help="T (default: 64)")
    p.add_argument("--batch", type=_common.positive_int, default=4, help="B (default: 4)")
    p.add_argument(
        "--seeds",
        type=_common.seeds,
        default=None,
        help="batches to average over: a count K (seeds 0..K-1) or a list such as 3,5 or "
        "3-5 (default: seed 0; for the lesson, the bank seeds, default 42: its own)",
    )
    p.add_argument("--depth", type=_common.positive_int, default=20,
                   help="the lesson's N (default: 20)")  # fmt: skip
    p.add_argument("--plain", action="store_true", help="the lesson's stack without + x")
    p.add_argument(
        "--veit",
        type=_common.positive_int,
        default=None,
        metavar="N",
        help="also Veit et al.'s protocol: N sampled single paths per k (first seed only)",
    )
    p.add_argument("--format", choices=FORMATS, default="table", help="output format")
    _common.add_threads(p)
    p.set_defaults(func=cmd_paths)


def _splits(args: argparse.Namespace) -> tuple[list, list, str]:
    """(splits, chains for --veit, a one-line description of what was measured)."""
    if args.source == "lesson":
        _common.refuse_with(args.argv, ("--text", "--meta", "--best", "--seq", "--batch"),
                            "lesson", "the lesson's stack has its own input")  # fmt: skip
        seeds = args.seeds or (42,)
        chains = [paths.stack_chain(StackConfig(depths=(args.depth,), seed=s),
                                    residual=not args.plain) for s in seeds]  # fmt: skip
        return [paths.split(c) for c in chains], chains[:1], f"{chains[0].label} N={args.depth}"
    _common.refuse_with(args.argv, ("--depth", "--plain"), "a model",
                        "they shape the lesson's stack")  # fmt: skip
    from resgrad.train.data import default_corpus, read_text

    text = read_text(args.text) if args.text is not None else default_corpus()
    model, tok = _load(args)
    seeds = args.seeds or (0,)
    ids = tok.encode(text)
    splits = paths.model_splits(model, ids, args.seq, args.batch, seeds)
    chains = []
    if args.veit:
        from resgrad.lab.realflow import text_windows

        w = text_windows(ids, args.seq, args.batch, seeds[0])  # (B, T + 1)
        m64 = model if model.dtype == np.float64 else None
        if m64 is None:
            from resgrad.nn.model import GPT

            m64 = GPT.from_params(model.cfg, {k: v.astype(np.float64)
                                              for k, v in model.params.items()})  # fmt: skip
        chains = [paths.gpt_chain(m64, w[:, :-1], w[:, 1:])]
    c = model.cfg
    name = os.path.basename(os.path.normpath(args.source))
    return (
        splits,
        chains,
        f"{name} ({c.variant}, L={c.n_layer}, C={c.n_embd}), T={args.seq} B={args.batch}",
    )


def _load(args: argparse.Namespace):
    src = args.source
    is_run = os.path.isdir(src) and any(
        os.path.exists(os.path.join(src, f)) for f in ("last.ckpt", "best.ckpt")
    )
    if is_run or src.endswith(".ckpt"):
        from resgrad.train.sample import load_model

        _common.refuse_with(args.argv, ("--meta",), "a resgrad run",
                            "a resgrad run keeps its vocabulary in its checkpoint")  # fmt: skip
        model, tok, _ = load_model(src, args.best)
        return model, tok
    _common.refuse_with(args.argv, ("--best",), "a pretrained model",
                        "--best picks a training run's best.ckpt")  # fmt: skip
    from resgrad.train.pretrained import load_pretrained

    def fits(m) -> None:  # before the weights are read; the split needs about n/2 more
        memory.require(memory.pretrained_flow_bytes(m, args.seq, args.batch),
                       f"this model (L={m.n_layer} C={m.n_embd} V={m.vocab_size}) on "
                       f"{args.batch} windows of {args.seq} tokens")  # fmt: skip

    return load_pretrained(src, meta=args.meta, fits=fits)


def cmd_paths(args: argparse.Namespace) -> int:
    splits, chains, what = _splits(args)
    rows = paths.path_table(splits)
    lo, hi = paths.effective_range([r.share_norm for r in rows])
    veit = paths.veit_sample(chains[0], args.veit, seed=0) if args.veit and chains else None
    if args.format == "table":
        print(f"{what}; seeds: {len(splits)}; n = {splits[0].n} branches; at x_0")
        head = f"{'k':>3} | {'paths C(n,k)':>12} | {'share of norm':>17} | {'share by proj.':>17}"
        head += f" | {'Veit mean |g|':>13} | {'C(n,k) x mean':>13}" if veit else ""
        print(head + "\n" + "-" * len(head))
        for r in rows:
            line = (f"{r.k:>3} | {r.count:>12} | {r.share_norm:>8.4f} ± {r.share_norm_std:<6.4f}"
                    f" | {r.share_proj:>8.4f} ± {r.share_proj_std:<6.4f}")  # fmt: skip
            if veit:
                line += f" | {veit.mean[r.k]:>13.4e} | {veit.total[r.k]:>13.4e}"
            print(line)
        print(f"90% of the gradient's norm lies on paths of k = {lo}..{hi} "
              f"({sum(r.count for r in rows[lo:hi + 1])} of {2 ** splits[0].n} paths)")  # fmt: skip
        err = max(s.sum_errors.max() for s in splits)
        print(f"the parts sum to the gradient to {err:.1e} (relative)")
    elif args.format == "csv":
        print(_common.render_rows(rows, ROW_KEYS, "csv"), end="")
    else:
        print(json.dumps(_json(splits, rows, (lo, hi), veit, what), indent=2))
    return 0


def _json(splits, rows, rng, veit, what) -> dict:
    def ms(a):  # (S, ...) -> mean and std lists over the seeds
        a = np.asarray(a)
        return a.mean(axis=0).tolist(), a.std(axis=0).tolist()

    nb = splits[0].norms.shape[0]
    bounds = []
    for i in range(nb):
        norms, norms_std = ms([s.norms[i] for s in splits])
        sn, sn_std = ms([s.share_norm()[i] for s in splits])
        sp, sp_std = ms([s.share_proj()[i] for s in splits])
        bounds.append({"boundary": i, "norms": norms, "norms_std": norms_std,
                       "share_norm": sn, "share_norm_std": sn_std,
                       "share_proj": sp, "share_proj_std": sp_std})  # fmt: skip
    out = {
        "source": what, "n": splits[0].n, "seeds": len(splits),
        "range90": list(rng), "rows": [r._asdict() for r in rows], "boundaries": bounds,
    }  # fmt: skip
    if veit is not None:
        out["veit"] = {"samples": veit.samples, "mean": veit.mean.tolist(),
                       "std": veit.std.tolist(), "total": veit.total.tolist()}  # fmt: skip
    return json.loads(json.dumps(out, default=float))
