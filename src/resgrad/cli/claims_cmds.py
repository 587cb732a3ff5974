"""``resgrad claims``: DeepNet's update size and GPT-2's scaled init, measured over seeds
(registered by :mod:`resgrad.cli.experiment_cmds`, after ``experiment``)."""

from __future__ import annotations

import argparse

from resgrad.cli import _common
from resgrad.lab.experiments import CLAIMS, claim_table, format_claims
from resgrad.perf import memory


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "claims",
        help="DeepNet's update size and GPT-2's scaled init, measured over seeds",
        description="update-size: ||x_L' - x_L|| / ||x_L|| after one SGD step (lr 1e-2, Xavier "
        "init) for post-LN and DeepNorm (Wang et al. 2022). scaled-init: ||x_L|| / ||x_0|| of a "
        "pre-LN stack with GPT-2's 1/sqrt(2L) output projections and with it undone (Radford "
        "et al. 2019). Prints mean ± std and min..max over the seeds.",
    )
    p.add_argument("claim", choices=CLAIMS, help="which claim")
    p.add_argument("--depths", type=_common.int_list, default=(6, 24, 96),
                   help="comma-separated depths (default: 6,24,96)")  # fmt: skip
    p.add_argument("--seeds", type=_common.seeds, default=tuple(range(10)),
                   help="a count K (seeds 0..K-1) or a list, e.g. 100,101,102 or 100-109 "
                   "(default: 10, seeds 0-9)")  # fmt: skip
    _common.add_threads(p)
    p.set_defaults(func=cmd_claims)


def cmd_claims(args: argparse.Namespace) -> int:
    L = max(args.depths)  # the claims' stacks: width 32, 4 heads, T <= 16, B = 4, float64
    memory.require(memory.gpt_bytes(L, 32, 4, 16, 4, 65, 8, 4), f"these claims (depth {L})")
    print(format_claims(claim_table(args.claim, args.depths, args.seeds)))
    return 0
