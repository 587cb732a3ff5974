"""What the training commands print when a run ends: ``resgrad train``'s last line and
``resgrad depth-train``'s table of its variants.
"""

from __future__ import annotations

from collections.abc import Mapping

from resgrad.train.loop import TrainResult

__all__ = ["depth_train_table", "done_line"]


def done_line(res: TrainResult) -> str:
    """One line on a finished call of :func:`resgrad.train.loop.train`: its steps (a resumed
    run's from where it began), time, and the last and best losses."""
    resumed = f" ({res.start} to {res.iterations})" if res.start else ""  # this call's
    return (
        f"done: {res.iterations - res.start} iterations{resumed} in {res.seconds:.1f} s "
        f"({res.ms_per_iter:.1f} ms per iteration); train loss {res.train_loss:.4f}, "
        f"val loss {res.val_loss:.4f}, best val loss {res.best_val_loss:.4f}"
    )


def depth_train_table(summary: Mapping, n_layer: int) -> str:
    """The variants of a depth-train ``summary`` (what
    :func:`resgrad.lab.experiments.depth_train` returns) side by side, after a blank line:
    final train and val loss, and the gradient norm of the first and last of its
    ``n_layer`` blocks at the first and last step."""
    lines = ["", f"{'variant':<10} {'train':>8} {'val':>8}   grad norm of block 0 / block "
             f"{n_layer - 1}"]  # fmt: skip
    for v, s in summary["variants"].items():
        first, last = s["first_step_layer_grad_norms"], s["last_step_layer_grad_norms"]
        norms = (
            f"first step {first[0]:.2e} / {first[-1]:.2e}, last step {last[0]:.2e} / {last[-1]:.2e}"
            if first
            else "-"
        )
        lines.append(f"{v:<10} {s['train_loss']:>8.4f} {s['val_loss']:>8.4f}   {norms}")
    return "\n".join(lines) + "\n"
