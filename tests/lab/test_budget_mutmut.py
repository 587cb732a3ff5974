"""lab.study.budget, the cost said before the work: the estimate is the cost model its
docstrings state (a branch VJP's flops at the measured rate plus a fixed cost, each chain's
forward and backward about 2n of them plus the head), a count of VJPs is a whole number, a
time is shown in the largest unit it has reached and rounded to what it prints, and the
progress bar shows only for work longer than its threshold, scales a count of millions of
VJPs, and follows the terminal's width. A factor dropped or swapped, a boundary moved by
one, a count turned float, a bar sized once are the bugs mutmut plants here
(scripts/mutmut/run.py)."""

import fcntl
import io
import os
import struct
import termios

import pytest

from resgrad.lab.study import budget
from resgrad.nn.model import GPTConfig

# every size a different prime, so that a factor swapped or dropped changes the estimate
B, T, C, V, L = 3, 7, 11, 13, 5


def _documented_gpt(variant: str, chains: int, samples: int) -> tuple[int, float]:
    """VJPs and seconds as model_work's docstring and the module's constants state them."""
    n = 2 * L  # two branches a block
    per_split = n * (n + 1) // 2 if variant != "none" else n
    per_veit = samples * (n * (n + 1) // 2 if variant != "none" else n)
    vjps = chains * (per_split + per_veit)
    flops = 24 * B * T * C**2 + 4 * B * T**2 * C  # the weights' matmuls, the scores
    vjp_s = budget.GPT_VJP_OVERHEAD_S + flops / budget.FLOPS_PER_S
    chain_s = 2 * n * vjp_s + 6 * B * T * V * C / budget.FLOPS_PER_S  # forward, backward, head
    return vjps, vjps * vjp_s + chains * chain_s


@pytest.mark.parametrize("variant", ["pre-ln", "none"])
@pytest.mark.parametrize("chains, samples", [(1, 0), (4, 0), (2, 9)])
def test_the_gpt_estimate_is_the_documented_cost_model(variant, chains, samples):
    cfg = GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=1, n_embd=C, variant=variant)
    w = budget.model_work(cfg, seq=T, batch=B, chains=chains, samples=samples)
    vjps, seconds = _documented_gpt(variant, chains, samples)
    assert type(w.vjps) is int and w.vjps == vjps
    assert w.seconds == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("chains, samples", [(1, 0), (3, 5)])
def test_the_lesson_estimate_is_the_documented_cost_model(residual, chains, samples):
    depth, width, batch = 6, 17, 5
    w = budget.lesson_work(depth, width, batch, chains, samples=samples, residual=residual)
    parts = depth * (depth + 1) // 2 if residual else depth  # no skip: one part
    vjps = chains * (parts + samples * parts)
    # a branch VJP is two (B, C) x (C, C) matmuls; a chain's forward and backward 2 depth
    vjp_s = budget.LESSON_VJP_OVERHEAD_S + 2 * 2 * batch * width**2 / budget.FLOPS_PER_S
    assert type(w.vjps) is int and w.vjps == vjps
    assert w.seconds == pytest.approx(vjps * vjp_s + chains * 2 * depth * vjp_s, rel=1e-12)


def test_a_refusal_counts_the_estimated_vjps_as_a_whole_number():
    w = budget.lesson_work(2000, 16, 4, chains=1)
    with pytest.raises(ValueError) as e:
        budget.require_time(w, 1.0, "it", "pass --budget {seconds}")
    assert "(2,001,000 branch VJPs; an estimate)" in str(e.value)


@pytest.mark.parametrize(
    "t, text",
    [(59.4, "59 s"), (60, "1.0 min"), (3599, "60.0 min"), (3600, "1.0 h"), (86399, "24.0 h"),
     (86400, "1.0 days"), (86400 * 1234.5, "1,234.5 days")],
)  # fmt: skip
def test_a_time_is_shown_in_the_largest_unit_it_has_reached(t, text):
    assert budget.format_seconds(t) == text


@pytest.mark.parametrize(
    "unit, seconds, start, stop, step",
    [("min", 60, 60, 3600, 1), ("h", 3600, 3600, 86400, 1), ("days", 86400, 86400, 864000, 3)],
)
def test_a_shown_time_is_the_time_in_its_unit_rounded_to_a_tenth(unit, seconds, start, stop, step):
    for t in range(start, stop, step):
        number, shown = budget.format_seconds(t).split()
        assert shown == unit
        assert abs(float(number.replace(",", "")) - t / seconds) <= 0.05 + 1e-9, t


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_bar_shows_on_a_terminal_only_for_work_longer_than_its_threshold(monkeypatch):
    monkeypatch.setattr("sys.stderr", _Terminal())
    at = budget.Work(vjps=10, seconds=budget.PROGRESS_AFTER_S)
    above = budget.Work(vjps=10, seconds=budget.PROGRESS_AFTER_S * (1 + 1e-9))
    assert budget.work_bar(at).disable and not budget.work_bar(above).disable


def _shown(bar_, done):
    err = io.StringIO()
    with bar_(err) as b:
        b.update(done)
    return err.getvalue().rsplit("\r", 1)[-1]


def test_the_bar_scales_millions_of_vjps_and_counts_other_units_whole(monkeypatch):
    w = budget.Work(vjps=2_500_000, seconds=50.0)

    def vjp_bar(err):
        monkeypatch.setattr("sys.stderr", err)
        return budget.work_bar(w, progress=True, desc="paths")

    def pass_bar(err):
        monkeypatch.setattr("sys.stderr", err)
        return budget.bar(1500, 50.0, "pass", "lesion", show=True)

    vjps = _shown(vjp_bar, 1_250_000)
    assert "paths (about 50 s)" in vjps and "1.25M/2.50M" in vjps and "VJP/s" in vjps
    passes = _shown(pass_bar, 750)
    assert "lesion (about 50 s)" in passes and "750/1500" in passes and "pass/s" in passes


def test_the_bar_follows_the_terminals_width(monkeypatch):
    master, slave = os.openpty()  # a terminal whose width the test sets

    class Window(_Terminal):
        def fileno(self):
            return slave

    def resize(cols):
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))

    err = Window()
    monkeypatch.setattr("sys.stderr", err)
    try:
        resize(100)
        with budget.work_bar(budget.Work(vjps=50, seconds=9.0), progress=True) as b:
            b.update(10)
            b.refresh()
            resize(50)  # the window is made narrower while the work runs
            b.update(10)
            b.refresh()
    finally:
        os.close(slave)
        os.close(master)
    # each redraw is the bar, then spaces over what is left of a longer one before it
    widths = [len(s.rstrip()) for s in err.getvalue().split("\r") if s.startswith("paths")]
    assert max(widths) > 60 and widths[-1] <= 50


# ------------------------------------------ the estimate line where no bar is drawn


class _Err(io.StringIO):
    """stderr that is no terminal, counting its flushes."""

    flushes = 0

    def flush(self):
        self.flushes += 1
        super().flush()


UNITS = [
    (1, "VJP", "1 VJP"),
    (28, "VJP", "28 VJPs"),
    (1, "pass", "1 pass"),
    (3, "pass", "3 passes"),
]


@pytest.mark.parametrize("total, unit, said", UNITS)
def test_the_estimate_line_counts_its_units_in_words(monkeypatch, total, unit, said):
    err = _Err()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setitem(budget._SPEAK, "off_terminal", True)
    budget.bar(total, budget.PROGRESS_AFTER_S + 1, unit, "lesion").close()
    assert err.getvalue() == (f"resgrad lesion: about 4 s ({said}); it keeps nothing part-way: "
                              "Ctrl-C stops it\n")  # fmt: skip
    assert err.flushes >= 1  # said at once, before the work, not when the buffer fills


def test_speak_estimates_turns_the_line_on_by_default_and_off_when_asked(monkeypatch):
    monkeypatch.setitem(budget._SPEAK, "off_terminal", False)
    budget.speak_estimates()
    assert budget._SPEAK["off_terminal"] is True
    budget.speak_estimates(False)
    assert budget._SPEAK["off_terminal"] is False


def test_a_stderr_that_cannot_say_is_no_terminal(monkeypatch):
    monkeypatch.setattr("sys.stderr", object())  # no isatty at all
    assert budget._on_terminal() is False
    closed = io.StringIO()
    closed.close()  # isatty raises ValueError
    monkeypatch.setattr("sys.stderr", closed)
    assert budget._on_terminal() is False
