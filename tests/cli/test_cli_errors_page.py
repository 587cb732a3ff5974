"""The errors page prints each refusal of the equal-loss study as the command prints it:
each bad command is run, and its one line must stand on the page, word for word."""

import contextlib
import pathlib

import pytest

from resgrad.cli import main

ERRORS_PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide" / "errors.md"
ROBUSTNESS_REFUSALS = [
    ["--seeds", "1"],
    ["--variants", "none"],
    ["--variants", "pre-ln", "--doses", "0.5"],
    ["--doses", "0,-0"],
    ["--keep-every", "700"],
    ["--levels", "99"],
    ["--warmups", "10"],
    ["--powers", "0,2"],
    ["--pilot-iters", "5"],
    ["--out-dir", "afile"],
    ["--budget", "1", "--jobs", "2"],
    ["--level", "3"],
]


@pytest.mark.parametrize("flags", ROBUSTNESS_REFUSALS, ids=lambda f: f[0])
def test_the_errors_page_prints_each_robustness_refusal_as_the_command_does(
    capsys, monkeypatch, tmp_path, flags
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a directory\n")
    with contextlib.suppress(SystemExit):
        assert main(["experiment", "robustness", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": error: " in err, err
    assert err.strip() in ERRORS_PAGE.read_text(encoding="utf-8"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # a refusal leaves nothing
