"""``resgrad check``: one row per check, PASS/FAIL, exit 1 on any failure."""

import subprocess
import sys

import numpy as np
import pytest

import resgrad.verify.selfcheck as S
from resgrad.cli import main


def test_check_passes_everything_and_prints_one_row_per_check(capsys):
    assert main(["check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["check", "mode"]
    rows = lines[1:-1]
    assert rows and all(" PASS " in r and " FAIL " not in r for r in rows)
    names = "\n".join(rows)
    for needle in ("linear", "layernorm", "multi-head attention", "cross-entropy", "dropout"):
        assert needle in names
    for v in ("pre-ln", "post-ln", "none", "residual", "rezero", "deepnorm"):
        assert f"block {v} " in names and f"gpt {v} " in names
    assert lines[-1].startswith(f"all {len(rows)} checks passed: max relative error ")
    worst = float(lines[-1].split("max relative error ")[1].split()[0])
    assert worst < 1e-7


def test_check_exits_1_and_says_fail_when_a_backward_is_broken(monkeypatch, capsys):
    def broken_gelu_backward(dout, cache):
        return dout * 0.5 * (1.0 + cache.t)  # drops the tanh'(u) term

    monkeypatch.setattr(S, "gelu_backward", broken_gelu_backward)
    assert main(["check", "--only", "layers"]) == 1
    out = capsys.readouterr().out
    bad = [ln for ln in out.splitlines() if "FAIL" in ln and not ln.startswith("FAIL")]
    assert len(bad) == 1 and bad[0].startswith("gelu")
    assert out.splitlines()[-1].startswith("FAIL: 1 of ")


def test_only_and_variants_select_rows(capsys):
    assert main(["check", "--only", "model", "--variants", "rezero"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:-1]
    assert rows and all(r.startswith("gpt rezero") for r in rows)


def test_seed_changes_the_inputs(capsys):
    main(["check", "--only", "layers", "--seed", "1"])
    a = capsys.readouterr().out
    main(["check", "--only", "layers", "--seed", "2"])
    assert capsys.readouterr().out != a


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--only", "everything"], "unknown name 'everything'; expected one of layers"),
        (["--variants", "prenorm"], "unknown name 'prenorm'; expected one of pre-ln"),
        (["--seed", "-1"], "expected a seed in [0, 2**32)"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args, needle):
    p = subprocess.run(
        [sys.executable, "-m", "resgrad", "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_help_says_where_the_pytorch_comparison_lives():
    p = subprocess.run(
        [sys.executable, "-m", "resgrad", "check", "--help"], capture_output=True, text=True
    )
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "PyTorch" in text and "tests/verify/test_torch_parity.py" in text and "float64" in text


def test_check_rows_are_reproducible():
    a = [r.row() for r in S.layer_checks(seed=3)]
    b = [r.row() for r in S.layer_checks(seed=3)]
    assert a == b
    assert np.isfinite([r.max_error for r in S.layer_checks(seed=3)]).all()
