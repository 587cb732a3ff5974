import subprocess
import sys

import pytest

from resgrad.cli import main
from tests.lesson_reference import LESSON_TABLE


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "resgrad", *args], capture_output=True, text=True, timeout=60
    )


def test_depth_with_no_flags_prints_the_lessons_table_byte_for_byte():
    p = run("depth")
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout == LESSON_TABLE


def test_same_command_same_bytes_twice():
    assert run("lesson").stdout == run("lesson").stdout


def test_lesson_runs_everything_in_order(capsys):
    assert main(["lesson"]) == 0
    out = capsys.readouterr().out
    assert LESSON_TABLE in out
    order = ["Measuring it", "Proving", "Exercise 1", "Exercise 2", "Exercise 3"]
    positions = [out.index(s) for s in order]
    assert positions == sorted(positions)
    assert out.count("dtype: float64") == 2
    assert "4.587620e+00" in out  # Exercise 1's first row, from the lesson's code at 0.9


def test_gradcheck_prints_like_the_lesson(capsys):
    assert main(["gradcheck"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("max relative error: ") and lines[1] == "dtype: float64"
    assert float(lines[0].split(": ")[1]) < 1e-7


def test_gradcheck_exits_1_above_the_bar(capsys):
    # a step of 0.5 makes the central difference itself inaccurate: the check must say so
    assert main(["gradcheck", "--eps", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "above the lesson's bar" in out


def test_depth_csv_and_ratio(capsys):
    assert main(["depth", "--format", "csv", "--ratio", "--depths", "3,7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "depth,no_residual,with_residual,ratio"
    assert [ln.split(",")[0] for ln in lines[1:]] == ["3", "7"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["depth", "--depths", "0"], "'0'"),
        (["depth", "--depths", "-3"], "'-3'"),
        (["depth", "--depths", "1,x"], "'x'"),
        (["depth", "--depths", "1,,2"], "'1,,2'"),
        (["depth", "--width", "0"], "'0'"),
        (["depth", "--batch", "-1"], "'-1'"),
        (["depth", "--scale", "nan"], "'nan'"),
        (["depth", "--scale", "inf"], "'inf'"),
        (["depth", "--format", "xml"], "'xml'"),
        (["depth", "--seed", "-5"], "'-5'"),
        (["gradcheck", "--blocks", "0"], "'0'"),
        (["gradcheck", "--eps", "0"], "'0'"),
        (["nonsense"], "'nonsense'"),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_status_2(args, needle):
    p = run(*args)
    assert p.returncode == 2
    assert p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr
