"""``resgrad check``: float64 finite-difference checks of every layer, block and the GPT."""

from __future__ import annotations

import argparse

from resgrad.cli import _common
from resgrad.nn.blocks import VARIANTS
from resgrad.verify.selfcheck import EPS, PARTS, RTOL, render_checks, run_checks


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="float64 gradient checks of every layer, every block and a whole GPT",
        description="Checks every hand-derived backward pass against central differences in "
        f"float64 (step {EPS:g}): every entry of every layer and of one block per residual "
        "scheme, then a whole 2-layer GPT in every scheme (seeded sparse entries and random "
        "directions). One row per check with its max relative error; exits 1 if any is above "
        f"{RTOL:g}. Entries whose gradient is below a central difference's rounding floor are "
        "judged by absolute error and counted in the 'floor' column. The comparison with PyTorch "
        "autograd is not run here (the library never imports torch); it is in the tests: "
        "python -m pytest tests/verify/test_torch_parity.py.",
    )
    p.add_argument(
        "--only",
        type=_common.name_list(PARTS),
        default=PARTS,
        help="comma-separated parts to check: layers, blocks, model (default: all)",
    )
    p.add_argument(
        "--variants",
        type=_common.name_list(VARIANTS),
        default=VARIANTS,
        help=f"residual schemes for the blocks and the model (default: {','.join(VARIANTS)})",
    )
    p.add_argument(
        "--seed", type=_common.seed, default=0, help="seed of inputs and parameters (default: 0)"
    )
    _common.add_threads(p)
    p.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    text, ok = render_checks(run_checks(args.seed, args.variants, args.only))
    print(text, end="")
    return 0 if ok else 1
