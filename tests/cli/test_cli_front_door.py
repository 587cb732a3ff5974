"""The front door: what a newcomer meets before any work starts.

- ``resgrad experiment NAME --help`` shows NAME's own flags, each with NAME's real default
  (read back from the library's configs, so that a changed default cannot leave the help
  behind), and hides the flags NAME refuses;
- a misspelt flag, subcommand or choice gets one line naming it, the nearest valid one and
  the command's help, prefixed by the command's whole name, as every later error is.
"""

import argparse
import re

import pytest

from resgrad.cli import build_parser, leaf, main
from resgrad.cli._experiments import EXPERIMENT_FLAGS, NAMES, ROBUSTNESS_FLAGS
from resgrad.lab.experiments import EXPERIMENTS, ExperimentConfig
from resgrad.lab.robustness import BUDGET_S, RobustnessConfig


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def _flag_help(text: str) -> dict[str, str]:
    """``--flag`` -> its help text, whitespace collapsed, from argparse's options section."""
    out, flag = {}, None
    for line in text.split("options:", 1)[1].splitlines():
        m = re.match(r"  (--[\w-]+)(?: \S+)?(?:\s{2,}(.*))?$", line)
        if m:
            flag = m[1]
            out[flag] = m[2] or ""
        elif flag and line.startswith(" " * 8):
            out[flag] += " " + line.strip()
    return {k: " ".join(v.split()).replace("- ", "-") for k, v in out.items()}


def _typed(value) -> str:
    if isinstance(value, tuple):
        return ",".join(_typed(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_each_experiment_help_gives_its_own_defaults(capsys, name):
    flags = _flag_help(_help(capsys, "experiment", name))
    cfg = ExperimentConfig.defaults(name)
    for flag, *_ in EXPERIMENT_FLAGS:
        if flag == "--data":
            continue
        want = _typed(getattr(cfg, flag[2:].replace("-", "_")))
        assert f"(default: {want})" in flags[flag], (flag, flags[flag])
    assert f"(default: out-experiment-{name})" in flags["--out-dir"]
    for flag, *_ in ROBUSTNESS_FLAGS:  # refused here: not offered
        assert flag not in flags
    assert "--quick" not in flags and "the experiment's" not in " ".join(flags.values())


def test_robustness_help_gives_the_study_defaults_and_quick(capsys):
    flags = _flag_help(_help(capsys, "experiment", "robustness"))
    cfg, quick = RobustnessConfig(), RobustnessConfig.quick()
    assert flags["--variants"].endswith(
        f"(default: {_typed(cfg.schemes)}; --quick: {_typed(quick.schemes)})"
    )
    assert f"(default: {_typed(cfg.depths)}; --quick: {_typed(quick.depths)})" in flags["--depths"]
    assert f"(default: {_typed(cfg.doses)}; --quick: {_typed(quick.doses)})" in flags["--doses"]
    assert f"(default: {_typed(cfg.seeds)})" in flags["--seeds"]  # --quick keeps them
    assert f"(default: {cfg.max_iters}; --quick: {quick.max_iters})" in flags["--max-iters"]
    assert f"(default: {cfg.keep_every})" in flags["--keep-every"]
    assert f"(default: {BUDGET_S:g})" in flags["--budget"]
    for flag in ("--lrs", "--warmups", "--grad-clip", "--init", "--log-to", "--log-dir"):
        assert flag not in flags  # refused by the study: not offered


def test_the_experiment_summary_names_every_experiment(capsys):
    text = _help(capsys)
    summary = " ".join(text.split("experiment", 1)[1].split("claims")[0].split())
    assert all(n in summary for n in NAMES), summary
    listed = _help(capsys, "experiment")
    assert all(re.search(rf"^    {n}\b", listed, re.M) for n in NAMES), listed


@pytest.mark.parametrize(
    "argv, prefix, named, nearest",
    [
        (["experiment", "robustness", "--level", "3.5"], "resgrad experiment robustness",
         "--level", "--levels"),
        (["experiment", "robustness", "--level=3.5"], "resgrad experiment robustness",
         "--level", "--levels"),
        (["train", "--max-iter", "3"], "resgrad train", "--max-iter", "--max-iters"),
        (["lesso"], "resgrad", "'lesso'", "lesson"),
        (["experiment", "robustnes"], "resgrad experiment", "'robustnes'", "robustness"),
        (["compare", "a", "--quantity", "gradd"], "resgrad compare", "'gradd'", "grad"),
        (["flow", "--variant", "pre_ln"], "resgrad flow", "'pre_ln'", "pre-ln"),
    ],
)  # fmt: skip
def test_a_typo_names_the_nearest_and_the_help(capsys, argv, prefix, named, nearest):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"{prefix}: error: ") and named in err, err
    assert f"did you mean '{nearest}'?" in err, err
    if not argv[-1].startswith("pre_"):  # a flag's value list names its choices instead
        assert f"`{prefix} --help`" in err, err


def test_nothing_near_is_suggested_as_nothing(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--zzzzzz", "1"])
    err = capsys.readouterr().err
    assert "unrecognized argument --zzzzzz" in err and "did you mean" not in err, err
    assert "`resgrad train --help` lists the flags" in err
    with pytest.raises(SystemExit):
        main(["experiment", "qqqqqq"])
    err = capsys.readouterr().err
    assert "did you mean" not in err and "choose from 'warmup'" in err, err


def test_a_stray_argument_is_named(capsys):
    with pytest.raises(SystemExit):
        main(["depth", "extra"])
    err = capsys.readouterr().err
    assert err == "resgrad depth: error: unrecognized argument 'extra' (`resgrad depth --help` " \
        "lists the arguments)\n", err


def test_later_errors_carry_the_same_prefix(capsys, tmp_path):
    """A refusal raised by the library, after parsing, says the same command name."""
    code = main(["experiment", "robustness", "--seeds", "1", "--out-dir", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("resgrad experiment robustness: error: --seeds 0 is 1 training seed")
    assert not (tmp_path / "o").exists()


def test_leaf_finds_the_command_that_ran():
    parser = build_parser()
    args = parser.parse_args(["experiment", "depth", "--seeds", "2"])
    assert leaf(parser, args).prog == "resgrad experiment depth" == args.prog
    args = parser.parse_args(["lesson"])
    assert leaf(parser, args).prog == "resgrad lesson" == args.prog
    assert isinstance(leaf(parser, args), argparse.ArgumentParser)
