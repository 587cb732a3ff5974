"""``resgrad paths``: the gradient split by path length, on a trained model or the lesson."""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from resgrad.cli import _common
from resgrad.formats.records import to_csv
from resgrad.lab import budget, pathchains, pathfigs, pathruns, paths
from resgrad.lab.lesson import StackConfig
from resgrad.perf import memory
from resgrad.plots import check_plot_path

FORMATS = ("table", "json", "csv")
MODEL_SEEDS = (0, 1, 2)  # a model's default --seeds: mean ± std over 3 batches
LESSON_SEEDS = (42,)  # the lesson's default bank seed: its own table
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
    p.add_argument(
        "source",
        metavar="SOURCE",
        nargs="+",
        help="run directory, checkpoint, model, or lesson; with --every-checkpoint, one or "
        "more run directories (e.g. one per seed: mean ± std over them)",
    )
    _common.add_model_input(p)
    p.add_argument(
        "--veit",
        type=_common.positive_int,
        default=None,
        metavar="N",
        help="also Veit et al.'s protocol: N sampled single paths per k, on every seed's "
        "batch (the table gives their mean)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="draw Veit et al.'s figure 6 for this model at x_0 (path counts, magnitude per "
        "path, total by k beside the exact split) and the share by (boundary, k): .png or .svg",
    )
    _common.add_study_output(p, "the split", FORMATS)
    _common.add_threads(p)
    p.set_defaults(func=cmd_paths)


def _splits(args: argparse.Namespace) -> tuple[list, list, str]:
    """(splits, Veit's estimates (--veit) or None, a one-line description of what was
    measured)."""
    from resgrad.train.source import ALL, encode_text, load_source, names_lesson, resolve_source

    if names_lesson(args.source):
        _common.refuse_with(args.argv, ("--text", "--seq", "--batch"),
                            "lesson", "the lesson's stack has its own input")  # fmt: skip
    else:
        _common.refuse_with(args.argv, ("--depth", "--plain"), "a model",
                            "they shape the lesson's stack")  # fmt: skip
    # the one resolver names the kind, and refuses --best and --meta where they mean nothing
    src = resolve_source(args.source, best=args.best, meta=args.meta, kinds=ALL)
    if src.kind == "lesson":
        seeds = args.seeds or LESSON_SEEDS
        sc = StackConfig(depths=(args.depth,))
        need = memory.lesson_paths_bytes(args.depth, sc.width, sc.batch, len(seeds))
        what = f"the lesson's stack of depth {args.depth}"
        memory.require(need + paths.veit_bytes(args.veit or 0), f"{what} ({len(seeds)} seed(s))")
        work = budget.lesson_work(args.depth, sc.width, sc.batch, len(seeds), args.veit or 0,
                                  residual=not args.plain)  # fmt: skip
        _require_time(work, args, what, len(seeds))
        chains = [pathchains.stack_chain(StackConfig(depths=(args.depth,), seed=s),
                                         residual=not args.plain) for s in seeds]  # fmt: skip
        with budget.work_bar(work) as bar:
            veits = None
            if args.veit:
                veits = [paths.veit_sample(c, args.veit, seed=0, tick=bar.update) for c in chains]
            splits = [paths.split(c, tick=bar.update) for c in chains]
        return splits, veits, f"{chains[0].label} N={args.depth}"
    from resgrad.train.data import default_corpus, read_text

    text = read_text(args.text) if args.text is not None else default_corpus()
    # the shape from the model's config, before its weights are read (a run's: once loaded)
    model, tok = load_source(src, fits=lambda m: _fits(m, args))
    _fits(model.cfg, args)  # a run's model is loaded first: its shape is in its checkpoint
    seeds = args.seeds or MODEL_SEEDS
    ids = encode_text(tok, text, args.text)  # (N,); a text it cannot encode names the fix
    work = budget.model_work(model.cfg, args.seq, args.batch, len(seeds), args.veit or 0)
    with budget.work_bar(work) as bar:
        splits = paths.model_splits(model, ids, args.seq, args.batch, seeds, tick=bar.update)
        veits = None
        if args.veit:
            veits = paths.model_veit(model, ids, args.seq, args.batch, seeds, args.veit,
                                     tick=bar.update)  # fmt: skip
    c = model.cfg
    name = os.path.basename(os.path.normpath(args.source))
    return (
        splits,
        veits,
        f"{name} ({c.variant}, L={c.n_layer}, C={c.n_embd}), T={args.seq} B={args.batch}",
    )


def _fits(m, args: argparse.Namespace, chains: int | None = None) -> None:
    """Refuse in one line, before the work, a model (its GPTConfig ``m``) that --seq does not
    fit, a split that cannot fit in memory (one batch at a time), and work estimated longer
    than --budget: ``chains`` splits (default: one per seed; 0: no time check here, the
    caller makes one for all its checkpoints)."""
    if args.seq > m.block_size:
        given = "" if _common.typed(args.argv, ("--seq",)) else " (the default)"
        raise ValueError(f"--seq {args.seq}{given} is longer than the model's {m.block_size} "
                         f"positions; pass --seq {m.block_size} or less")  # fmt: skip
    veit = args.veit or 0
    memory.require(memory.paths_bytes(m, args.seq, args.batch) + paths.veit_bytes(veit),
                   f"splitting this model (L={m.n_layer} C={m.n_embd} V={m.vocab_size}) on "
                   f"{args.batch} windows of {args.seq} tokens")  # fmt: skip
    if chains is None:
        chains = len(args.seeds or MODEL_SEEDS)
    if chains:
        work = budget.model_work(m, args.seq, args.batch, chains, veit)
        _require_time(work, args, f"this model (L={m.n_layer} C={m.n_embd} V={m.vocab_size}) "
                      f"on {args.batch} windows of {args.seq} tokens", chains)  # fmt: skip


def _require_time(work: budget.Work, args: argparse.Namespace, what: str, chains: int) -> None:
    """Refuse work estimated longer than --budget, naming the counts that multiply it."""
    counts = f"{chains:,} split{'s' * (chains != 1)}"
    if args.veit:
        counts += f" and --veit {args.veit:,} sampled paths per k"
    budget.require_time(work, args.budget, f"{what} ({counts})",
                        "pass --budget {seconds} to allow it, or ask for less")  # fmt: skip


def cmd_paths(args: argparse.Namespace) -> int:
    if args.every_checkpoint:
        return _every_checkpoint(args)  # which refuses --plot
    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    if len(args.source) > 1:
        raise ValueError(f"{len(args.source)} SOURCEs given; several are compared only with "
                         "--every-checkpoint (one run directory each)")  # fmt: skip
    args.source = args.source[0]
    splits, veits, what = _splits(args)
    rows = paths.path_table(splits)
    lo, hi = paths.effective_range([r.share_norm for r in rows])
    S = len(splits)
    if args.plot:  # saved before anything is printed: a reader that leaves loses no plot
        pathfigs.save_path_figure(args.plot, splits, veits, what)
    if args.format == "table":
        print(f"{what}; seeds: {S}" + (" (mean ± std)" if S > 1 else "")
              + f"; n = {splits[0].n} branches; at x_0")  # fmt: skip
        w = 17 if S > 1 else 14  # one seed: no spread to print
        head = f"{'k':>3} | {'paths C(n,k)':>12} | {'share of norm':>{w}} | {'share by proj.':>{w}}"
        if veits:
            head += f" | {'Veit mean |g|':>13} | {'C(n,k) x mean':>13} | {'||part_k||':>10}"
        print(head + "\n" + "-" * len(head))
        v_mean = np.mean([v.mean for v in veits], axis=0) if veits else None  # (K,)
        v_total = np.mean([v.total for v in veits], axis=0) if veits else None  # (K,)
        for r in rows:
            line = (f"{r.k:>3} | {r.count:>12} | {_pm(r.share_norm, r.share_norm_std, S)}"
                    f" | {_pm(r.share_proj, r.share_proj_std, S)}")  # fmt: skip
            if veits:
                line += f" | {v_mean[r.k]:>13.4e} | {v_total[r.k]:>13.4e} | {r.norm:>10.3e}"
            print(line)
        print(f"90% of the gradient's norm lies on paths of k = {lo}..{hi} "
              f"({paths.paths_in_range(rows, (lo, hi))} of {2 ** splits[0].n} paths)")  # fmt: skip
        if veits:
            vlo, vhi = paths.effective_range(v_total)
            print(f"Veit: {args.veit} sampled paths per k for each seed, the mean over {S} "
                  "seed(s); C(n,k) x mean sums magnitudes, the exact ||part_k|| vectors; "
                  f"90% of the sum of magnitudes lies on k = {vlo}..{vhi}")  # fmt: skip
        err = max(s.sum_errors.max() for s in splits)
        print(f"the parts sum to the gradient to {err:.1e} (relative)")
    elif args.format == "csv":
        print(_common.render_rows(rows, ROW_KEYS, "csv"), end="")
    else:
        print(json.dumps(_json(splits, rows, (lo, hi), veits, what), indent=2))
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)
    return 0


def _pm(mean: float, std: float, seeds: int) -> str:
    """``mean ± std`` over the seeds; the mean alone for one seed (it has no spread)."""
    return f"{mean:>8.4f} ± {std:<6.4f}" if seeds > 1 else f"{mean:>14.4f}"


def _json(splits, rows, rng, veits, what) -> dict:
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
    if veits:
        # mean and total: over the seeds (their std: the spread over seeds); std: the spread
        # of single paths' magnitudes within a seed, averaged over the seeds
        mean, mean_std = ms([v.mean for v in veits])
        total, total_std = ms([v.total for v in veits])
        out["veit"] = {"samples": veits[0].samples, "seeds": len(veits), "mean": mean,
                       "mean_std": mean_std, "std": ms([v.std for v in veits])[0],
                       "total": total, "total_std": total_std,
                       "range90": list(paths.effective_range(total))}  # fmt: skip
    return json.loads(json.dumps(out, default=float))


CKPT_KEYS = ["iteration", *ROW_KEYS, "range90_lo", "range90_hi"]  # --every-checkpoint's CSV


def _every_checkpoint(args: argparse.Namespace) -> int:
    """``--every-checkpoint``: one line per kept checkpoint (table), or every k (json, csv)."""
    _common.refuse_with(args.argv, ("--best", "--meta", "--depth", "--plain", "--veit", "--plot"),
                        "--every-checkpoint", "it reads every checkpoint a run kept, "
                        "one split per checkpoint")  # fmt: skip
    if "lesson" in args.source:
        raise ValueError("--every-checkpoint reads a training run's directory, not the lesson")
    real = [os.path.realpath(d) for d in args.source]  # run/ and ./run are one run
    twice = next((d for i, d in enumerate(args.source) if real[i] in real[:i]), None)
    if twice is not None:
        raise ValueError(f"run directory {twice!r} is given twice; each run counts once")
    from resgrad.train.data import read_text

    text = read_text(args.text) if args.text is not None else None
    seeds = args.seeds or MODEL_SEEDS
    work = _plan(args, text, seeds)  # every check before the first split
    if len(args.source) > 1:
        return _across_runs(args, text, seeds, work)
    args.source = args.source[0]
    with budget.work_bar(work) as bar:
        res = pathruns.run_checkpoint_paths(args.source, text, args.seq, args.batch, seeds,
                                            fits=lambda m: _fits(m, args, 0),
                                            tick=bar.update)  # fmt: skip
    n = res[0].splits[0].n
    if args.format == "table":
        name = os.path.basename(os.path.normpath(args.source))
        print(f"{name} ({res[0].splits[0].label}, L={n // 2}), T={args.seq} B={args.batch}; "
              f"window seeds: {len(seeds)}; n = {n} branches; at x_0")  # fmt: skip
        head = (f"{'iter':>6} | {'k=0 share':>17} | {'k=1 share':>17} | {'mean k':>6} | "
                f"{'90% range':>9} | {'paths in it':>11}")  # fmt: skip
        print(head + "\n" + "-" * len(head))
        for r in res:
            k0, k1 = r.rows[0], r.rows[1]
            lo, hi = r.range90
            inside = paths.paths_in_range(r.rows, r.range90)
            print(f"{r.iteration:>6} | {k0.share_norm:>8.4f} ± {k0.share_norm_std:<6.4f} | "
                  f"{k1.share_norm:>8.4f} ± {k1.share_norm_std:<6.4f} | {r.mean_k:>6.2f} | "
                  f"{f'{lo}..{hi}':>9} | {inside / 2**n:>11.2%}")  # fmt: skip
        err = max(s.sum_errors.max() for r in res for s in r.splits)
        print(f"shares of the gradient's norm; the parts sum to the gradient to {err:.1e}")
    elif args.format == "csv":
        rows = [{"iteration": r.iteration, **row._asdict(), "range90_lo": r.range90[0],
                 "range90_hi": r.range90[1]} for r in res for row in r.rows]  # fmt: skip
        print(to_csv(rows, CKPT_KEYS), end="")
    else:
        out = [{"iteration": r.iteration, "checkpoint": os.path.basename(r.path), "n": n,
                "seeds": len(r.splits), "range90": list(r.range90), "mean_k": r.mean_k,
                "rows": [x._asdict() for x in r.rows]} for r in res]  # fmt: skip
        print(json.dumps(json.loads(json.dumps(out, default=float)), indent=2))
    return 0


def _plan(args: argparse.Namespace, text: str | None, seeds: tuple[int, ...]) -> budget.Work:
    """Read every run's first checkpoint and refuse, before any split: runs that cannot be
    compared, a model --seq does not fit or memory cannot hold, and work estimated longer
    than --budget (every kept checkpoint of every run, one split per seed)."""
    plans = pathruns.plan_runs(args.source, text)
    for p in plans:
        _fits(p.cfg, args, 0)
    chains = sum(len(p.kept) for p in plans) * len(seeds)
    work = budget.model_work(plans[0].cfg, args.seq, args.batch, chains)
    m = plans[0].cfg
    what = (f"{len(plans)} run(s) (L={m.n_layer} C={m.n_embd}) on {args.batch} windows of "
            f"{args.seq} tokens at every kept checkpoint")  # fmt: skip
    _require_time(work, args, what, chains)
    return work


def _across_runs(args: argparse.Namespace, text: str | None, seeds: tuple, work) -> int:
    """``--every-checkpoint`` of several runs: per step they all kept, mean ± std over them."""
    with budget.work_bar(work) as bar:
        res = [
            pathruns.run_checkpoint_paths(d, text, args.seq, args.batch, seeds,
                                          fits=lambda m: _fits(m, args, 0), tick=bar.update)
            for d in args.source
        ]  # fmt: skip
    rows = pathruns.across_runs(res)
    n, R = res[0][0].splits[0].n, len(res)
    if args.format == "table":
        print(
            f"{R} runs ({res[0][0].splits[0].label}, L={n // 2}), T={args.seq} B={args.batch}; "
            f"window seeds: {len(seeds)}; n = {n} branches; at x_0; mean ± std over the runs"
        )
        head = f"{'iter':>6} | {'k=0 share':>17} | {'mean k':>13} | 90% range, each run"
        print(head + "\n" + "-" * len(head))
        for r in rows:
            ranges = ", ".join(f"{lo}..{hi}" for lo, hi in r.ranges)
            print(f"{r.iteration:>6} | {r.share0:>8.4f} ± {r.share0_std:<6.4f} | "
                  f"{r.mean_k:>5.2f} ± {r.mean_k_std:<5.2f} | {ranges}")  # fmt: skip
        print("shares of the gradient's norm: " + ", ".join(args.source))
    else:
        out = [{**r._asdict(), "ranges": [list(x) for x in r.ranges]} for r in rows]
        if args.format == "csv":
            keys = ["iteration", "runs", "share0", "share0_std", "mean_k", "mean_k_std"]
            print(to_csv(out, keys), end="")
        else:
            print(json.dumps({"runs": list(args.source), "rows": out}, indent=2))
    return 0
