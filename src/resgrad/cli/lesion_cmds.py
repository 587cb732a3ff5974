"""``resgrad lesion``: delete, swap and reorder blocks at test time, on a model or the lesson."""

from __future__ import annotations

import argparse
import json
import math
import os

from resgrad.cli import _common
from resgrad.formats.records import to_csv
from resgrad.lab import lesion, lesionfigs, lesionruns, lesionstudy, lesiontables
from resgrad.lab.lesson import StackConfig
from resgrad.perf import memory
from resgrad.plots import check_plot_path

FORMATS = ("table", "json", "csv")
MODEL_SEEDS = (0, 1, 2)  # a model's default --seeds: mean ± std over 3 batches
LESSON_SEEDS = (42,)  # the lesson's default bank seed: its own stack
LESSON_FLAGS = ("--depth", "--plain")
MODEL_FLAGS = ("--text", "--meta", "--best", "--seq", "--batch")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lesion",
        help="delete, swap and reorder blocks at test time: how much does the model lose?",
        description="A lesion study (Veit et al. 2016, section 4; Lad et al. 2024): at test "
        "time, with no retraining, delete one attention or MLP branch, one block, k random "
        "blocks, swap adjacent blocks or k random pairs, and measure each on text windows "
        "against the intact model: mean cross-entropy and its change, top-1 agreement with "
        "the intact model, top-1 accuracy, KL(intact || lesioned). SOURCE is a resgrad run "
        "directory or checkpoint file, a Hugging Face GPT-2 directory or hub name, a nanoGPT "
        "ckpt.pt, or 'lesson' (the lesson's tanh stack, whose figure is the relative change "
        "of its output). A deleted branch contributes nothing: in pre-ln, residual and rezero "
        "the skip carries x past it; in post-ln and deepnorm the LayerNorm after the sum "
        "stays (and DeepNorm's alpha); in none, which has no skip, the step passes x through.",
    )
    p.add_argument(
        "source",
        metavar="SOURCE",
        nargs="+",
        help="run directory, checkpoint, model, or lesson; several models of one shape (e.g. "
        "one run per training seed): the mean ± std over them",
    )
    p.add_argument(
        "--what",
        type=_common.name_list(lesion.KINDS),
        default=None,
        help="interventions, comma-separated: attn, mlp (one branch deleted), block (one "
        "block deleted), delete (k random blocks deleted), swap (blocks i and i + 1 "
        "swapped), pairs (k random disjoint pairs swapped) (default: all; the lesson: block, "
        "delete, swap, pairs)",
    )
    p.add_argument("--k", type=_common.int_list, default=None,
                   help="k for delete (1..L) and pairs (1..L/2), comma-separated (default: "
                   "every k)")  # fmt: skip
    p.add_argument(
        "--samples",
        type=_common.positive_int,
        default=10,
        metavar="N",
        help=f"random sets of each k, at most {lesion.MAX_SAMPLES:,}; every set where there "
        "are no more than N (default: 10)",
    )
    p.add_argument("--sample-seed", type=int, default=0, metavar="S",
                   help="seeds the random sets, in [0, 2**32) (default: 0)")  # fmt: skip
    p.add_argument(
        "--blocks",
        type=_common.nonneg_int_list,
        default=None,
        help="the layers of the single interventions (attn, mlp, block; swap i swaps i and "
        "i + 1), comma-separated (default: every one)",
    )
    _common.add_model_input(p)
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="draw three panels: the change in loss per deleted attention, MLP and block by "
        "layer; the k-deletion and k-swap curves with their spread; the adjacent swaps by "
        "layer (.png or .svg)",
    )
    _common.add_study_output(p, "the study", FORMATS)
    _common.add_threads(p)
    p.set_defaults(func=cmd_lesion)


def _plan(args: argparse.Namespace, L: int, lesson: bool = False) -> list:
    return lesion.plan(L, args.what, args.k, args.samples, args.sample_seed, args.blocks,
                       lesson=lesson)  # fmt: skip


def _require_time(cost: lesion.Cost, args: argparse.Namespace, what: str) -> None:
    lesion.require_time(cost, args.budget, what, "pass --budget {seconds} to allow it, or ask "
                        "for fewer --what, --k, --samples or --seeds")  # fmt: skip


def _fits(m, args: argparse.Namespace, seeds: tuple[int, ...], runs: int = 1) -> None:
    """Refuse in one line, before the model's weights are used (a Hugging Face directory's
    before they are read): a bad plan for its L, a --seq it does not fit, a study memory
    cannot hold, and one estimated longer than --budget (``runs`` alike)."""
    lesions = _plan(args, m.n_layer)
    if args.seq > m.block_size:
        given = "" if _common.typed(args.argv, ("--seq",)) else " (the default)"
        raise ValueError(f"--seq {args.seq}{given} is longer than the model's {m.block_size} "
                         f"positions; pass --seq {m.block_size} or less")  # fmt: skip
    what = f"this model (L={m.n_layer} C={m.n_embd} V={m.vocab_size})"
    memory.require(lesionstudy.lesion_bytes(m, args.seq, args.batch),
                   f"a lesion study of {what} on {args.batch} windows of {args.seq} "
                   "tokens")  # fmt: skip
    cost = lesion.model_cost(m, args.seq, args.batch, lesions, len(seeds) * runs)
    _require_time(cost, args, f"{what}, {len(lesions) - 1:,} interventions on "
                  f"{len(seeds) * runs} batch(es) of {args.batch} x {args.seq},")  # fmt: skip


def cmd_lesion(args: argparse.Namespace) -> int:
    if args.plot:
        check_plot_path(args.plot)  # a bad extension or destination fails before any work
    if not 0 <= args.sample_seed < lesion.MAX_SEED:
        raise ValueError(f"--sample-seed {args.sample_seed} is out of range; expected a seed "
                         "in [0, 2**32)")  # fmt: skip
    if args.samples > lesion.MAX_SAMPLES:
        raise ValueError(f"--samples {args.samples:,} is out of range; expected 1.."
                         f"{lesion.MAX_SAMPLES:,} random sets per k")  # fmt: skip
    twice = next((d for i, d in enumerate(args.source) if d in args.source[:i]), None)
    if twice is not None:
        raise ValueError(f"SOURCE {twice!r} is given twice; each model counts once")
    if args.every_checkpoint:
        return _every_checkpoint(args)
    from resgrad.train.source import ALL, names_lesson, resolve_source

    if any(names_lesson(s) for s in args.source):
        if len(args.source) > 1:
            raise ValueError("'lesson' is compared with nothing else: give it alone")
        return _lesson(args)
    _common.refuse_with(args.argv, LESSON_FLAGS, "a model", "they shape the lesson's stack")
    srcs = [resolve_source(s, best=args.best, meta=args.meta, kinds=ALL) for s in args.source]
    results, names = _models(args, srcs)
    table = (
        lesiontables.rows(results[0])
        if len(results) == 1
        else lesiontables.across_runs(results, names)
    )
    r0 = results[0]
    what = r0.label if len(results) == 1 else _runs_label(r0, names)
    _output(args, table, r0, what, len(results))
    return 0


def _lesson(args: argparse.Namespace) -> int:
    _common.refuse_with(args.argv, MODEL_FLAGS, "lesson", "the lesson's stack has its own input")
    seeds = args.seeds or LESSON_SEEDS
    sc = StackConfig(depths=(args.depth,))
    memory.require(memory.lesson_stack_bytes(args.depth, sc.width, sc.batch) * 2,
                   f"the lesson's stack of depth {args.depth}")  # fmt: skip
    lesions = _plan(args, args.depth, lesson=True)
    cost = lesion.lesson_cost(lesions, len(seeds))
    _require_time(cost, args, f"the lesson's stack of depth {args.depth}, {len(lesions) - 1:,} "
                  f"interventions on {len(seeds)} bank(s),")  # fmt: skip
    with lesion.progress_bar(cost) as bar:
        res = lesionstudy.lesson_study(args.depth, lesions, seeds, residual=not args.plain,
                                       tick=bar.update)  # fmt: skip
    _output(args, lesiontables.rows(res), res, res.label, 1)
    return 0


def _setting(args: argparse.Namespace, seeds: tuple[int, ...]) -> str:
    text = "the built-in corpus" if args.text is None else os.path.basename(args.text)
    return (f"T={args.seq} B={args.batch}, {len(seeds)} window seed(s), N={args.samples} "
            f"random sets per k; {text}")  # fmt: skip


def _models(args: argparse.Namespace, srcs: list) -> tuple[list, list[str]]:
    """Each SOURCE's study, in order; a model unlike the first is refused before its study."""
    from resgrad.lab.pathruns import check_comparable
    from resgrad.train.data import default_corpus, read_text
    from resgrad.train.source import encode_text, load_source

    text = read_text(args.text) if args.text is not None else default_corpus()
    seeds = args.seeds or MODEL_SEEDS
    names = [os.path.basename(os.path.normpath(s.name)) for s in srcs]
    if len(set(names)) < len(names):  # two runs named alike: their paths tell them apart
        names = [s.name for s in srcs]
    results, first = [], None
    for name, src in zip(names, srcs):
        model, tok = load_source(src, fits=lambda m: _fits(m, args, seeds, len(srcs)))
        ids = encode_text(tok, text, args.text)
        run = lesionstudy.describe_model(model.cfg, ids)
        if first is not None:
            check_comparable([first, (name, run)], "run")
        first = first or (name, run)
        lesions = _plan(args, model.cfg.n_layer)
        c = model.cfg
        label = lesionstudy.title(name, c.variant, c.n_layer, c.n_embd, _setting(args, seeds))
        cost = lesion.model_cost(c, args.seq, args.batch, lesions, len(seeds))
        with lesion.progress_bar(cost) as bar:
            res = lesionstudy.model_study(model, ids, lesions, args.seq, args.batch, seeds,
                                          label=label, run=run, tick=bar.update)  # fmt: skip
            results.append(res)
        del model
    return results, names


def _runs_label(r0, names: list[str]) -> str:
    m = r0.model
    setting = r0.label.split("), ", 1)[1]
    name = f"{len(names)} runs ({', '.join(names)})"
    return lesionstudy.title(name, m.scheme, m.depth, m.width, setting)


def _output(args: argparse.Namespace, table: list, res, what: str, runs: int) -> None:
    if args.plot:  # saved before anything is printed: a reader that leaves loses no plot
        lesionfigs.save_lesion_figure(args.plot, table, what)
    _print(args, table, res, what, runs)
    if args.plot:
        _common.wrote(args.plot, fmt=args.format)


def _print(args: argparse.Namespace, table: list, res, what: str, runs: int) -> None:
    if args.format == "csv":
        print(to_csv([r.record() for r in table], lesiontables.row_keys(res.metrics)), end="")
        return
    if args.format == "json":
        out = {"source": what, "runs": runs, "metrics": list(res.metrics),
               "seeds": list(res.seeds), "block_passes": res.block_passes,
               "full_passes": res.full_passes, "rows": [r.record() for r in table]}  # fmt: skip
        print(json.dumps(out, indent=2))
        return
    S = len(res.seeds)
    spread = (f"mean ± std over {runs} runs" if runs > 1
              else f"mean ± std over {S} seed(s)" if S > 1 else "one seed")  # fmt: skip
    print(f"Lesion study: {what}; {spread}")
    print(_table(table))
    if runs == 1:
        print("a random kind's k: mean ± std over its N sets, each averaged over the seeds")
    print(f"block forwards: {res.block_passes:,} of the {res.full_passes:,} a whole forward "
          "per intervention would run (the intact prefix reused)" + (" in the first run" if
          runs > 1 else ""))  # fmt: skip


HEADS = {"ce": "CE", "dce": "ΔCE", "agree": "agree w/ intact", "acc": "top-1 acc",
         "kl": "KL(intact||les.)", "change": "||y'-y|| / ||y||"}  # fmt: skip


def _pm(mean: float, std: float) -> str:
    return f"{mean:>8.4f} ± {std:<7.4f}" if math.isfinite(mean) else f"{'-':>18}"


def _table(table: list) -> str:
    metrics = table[0].metrics
    w = max(12, *(len(r.name) for r in table))
    head = f"{'intervention':<{w}} | {'k':>2} | {'N':>5} | " + " | ".join(
        f"{HEADS[m]:>18}" for m in metrics
    )
    lines = [head, "-" * len(head)]
    for r in table:
        cells = " | ".join(_pm(*r.get(m)) for m in metrics)
        lines.append(f"{r.name:<{w}} | {r.k:>2} | {r.samples:>5} | {cells}".rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- through training

CKPT_KEYS = ["iteration"]  # then lesiontables.row_keys(METRICS)
SUMMARY_HEAD = (f"{'iter':>6} | {'intact CE':>9} | {'ΔCE, 1 block':>18} | {'worst block':>17} | "
                f"{'agree, 1 block':>18} | {'ΔCE, adj. swap':>18}")  # fmt: skip


def _every_checkpoint(args: argparse.Namespace) -> int:
    """``--every-checkpoint``: one line per kept checkpoint (table), or every row (json, csv)."""
    _common.refuse_with(args.argv, ("--best", "--meta", "--plot", *LESSON_FLAGS),
                        "--every-checkpoint", "it reads every checkpoint a run kept, one "
                        "study per checkpoint")  # fmt: skip
    if "lesson" in args.source:
        raise ValueError("--every-checkpoint reads a training run's directory, not the lesson")
    from resgrad.lab.pathruns import plan_runs
    from resgrad.train.data import read_text

    text = read_text(args.text) if args.text is not None else None
    seeds = args.seeds or MODEL_SEEDS
    plans = plan_runs(args.source, text)  # every run's first checkpoint; unlike runs refused
    checkpoints = sum(len(p.kept) for p in plans)
    _fits(plans[0].cfg, args, seeds, checkpoints)  # all of it, before the first study
    lesions = _plan(args, plans[0].cfg.n_layer)
    cost = lesion.model_cost(plans[0].cfg, args.seq, args.batch, lesions, len(seeds) * checkpoints)
    kw = dict(what=args.what, ks=args.k, samples=args.samples, sample_seed=args.sample_seed,
              blocks=args.blocks)  # fmt: skip
    with lesion.progress_bar(cost) as bar:
        runs = [lesionruns.run_checkpoint_lesions(d, text, args.seq, args.batch, seeds, **kw,
                                                  fits=lambda m: _fits(m, args, seeds, 0),
                                                  tick=bar.update)
                for d in args.source]  # fmt: skip
    names = [os.path.basename(os.path.normpath(d)) for d in args.source]
    if len(set(names)) < len(names):
        names = list(args.source)
    steps = lesionruns.across_checkpoints(runs, names)
    keys = CKPT_KEYS + lesiontables.row_keys(lesionstudy.METRICS)
    if args.format == "csv":
        print(to_csv([{"iteration": it, **r.record()} for it, table, _ in steps for r in table],
                     keys), end="")  # fmt: skip
    elif args.format == "json":
        out = {"runs": names, "seeds": list(seeds), "metrics": list(lesionstudy.METRICS),
               "steps": [{"iteration": it, "rows": [r.record() for r in table]}
                         for it, table, _ in steps]}  # fmt: skip
        print(json.dumps(out, indent=2))
    else:
        m = plans[0].cfg
        spread = f"mean ± std over {len(runs)} runs" if len(runs) > 1 else "one run"
        print(f"Lesion study through training: {', '.join(names)} ({m.variant}, L={m.n_layer}, "
              f"C={m.n_embd}), {_setting(args, seeds)}; {spread}")  # fmt: skip
        print(SUMMARY_HEAD + "\n" + "-" * len(SUMMARY_HEAD))
        for it, _, sums in steps:
            print(_summary_line(it, sums))
        print("ΔCE, 1 block: the change in cross-entropy with one block deleted, mean over the "
              "blocks; worst block: the one whose deletion costs most")  # fmt: skip
    return 0


def _summary_line(it: int, sums: list) -> str:
    """One kept step: each run's summary, mean ± std (ddof 1) over the runs."""
    import numpy as np

    def pm(field: str) -> str:
        a = np.array([getattr(s, field) for s in sums], dtype=float)  # (R,)
        if not np.isfinite(a).all():
            return f"{'-':>18}"
        return _pm(float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0)

    worst = ",".join(str(s.worst_block) for s in sums)
    wd = np.mean([s.worst_dce for s in sums])
    ce = np.mean([s.ce for s in sums])
    return (f"{it:>6} | {ce:>9.4f} | {pm('block_dce')} | {worst + f' ({wd:.3f})':>17} | "
            f"{pm('block_agree')} | {pm('swap_dce')}")  # fmt: skip
