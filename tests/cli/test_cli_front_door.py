"""The front door: what a newcomer meets before any work starts.

- ``resgrad experiment NAME --help`` shows NAME's own flags, each with NAME's real default
  (read back from the library's configs, so that a changed default cannot leave the help
  behind), and hides the flags NAME refuses;
- a misspelt flag, subcommand or choice gets one line naming it, the nearest valid one and
  the command's help, prefixed by the command's whole name, as every later error is.
"""

import argparse
import os
import re
import shlex

import pytest

from resgrad.cli import build_parser, experiment_cmds, leaf, lesson_cmds, main, train_cmds
from resgrad.cli._experiments import EXPERIMENT_FLAGS, NAMES, ROBUSTNESS_FLAGS
from resgrad.lab.experiments import EXPERIMENTS, ExperimentConfig
from resgrad.lab.robustness import BUDGET_S, RobustnessConfig
from resgrad.lab.study.budget import PROGRESS_AFTER_S, plan_left


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
    assert f"(default: out/experiment-{name})" in flags["--out-dir"]
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
    assert f"(default: {_typed(cfg.seeds)}; --quick: {_typed(quick.seeds)})" in flags["--seeds"]
    assert f"(default: {cfg.max_iters}; --quick: {quick.max_iters})" in flags["--max-iters"]
    assert f"(default: {cfg.keep_every}; --quick: {quick.keep_every})" in flags["--keep-every"]
    assert f"(default: {BUDGET_S:g})" in flags["--budget"]
    assert f"(default: {_typed(cfg.powers)}; --quick: {_typed(quick.powers)})" in flags["--powers"]
    assert f"(default: {_typed(cfg.lrs)}; --quick: {_typed(quick.lrs)})" in flags["--lrs"]
    assert flags["--lrs"].startswith("the pilot's candidate peak learning rates")
    assert f"(default: {cfg.pilot_iters}; --quick: {quick.pilot_iters})" in flags["--pilot-iters"]
    assert f"(default: {cfg.permutations}; --quick: {quick.permutations})" in (
        flags["--permutations"])  # fmt: skip
    for flag in ("--warmups", "--grad-clip", "--init", "--log-to", "--log-dir"):
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
    assert (
        err == "resgrad depth: error: unrecognized argument 'extra' (`resgrad depth --help` "
        "lists the arguments)\n"
    ), err


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


# --------------------------------------------------------------- long work speaks, Ctrl-C


def _stop_after_plan(seconds, out_dir=None):
    """A stand-in for a long library call: it calls ``plan`` with ``seconds``, makes
    ``out_dir`` (work kept) if given, then is interrupted."""

    def fake(*args, plan=None, **kwargs):
        plan(seconds, "3 runs of 9 steps")
        if out_dir is not None:
            os.makedirs(out_dir)
        raise KeyboardInterrupt

    return fake


@pytest.mark.parametrize("seconds, kept", [(120.0, True), (1.0, False)])
def test_an_experiment_says_its_plan_and_what_ctrl_c_kept(capsys, monkeypatch, tmp_path,
                                                          seconds, kept):  # fmt: skip
    out = str(tmp_path / "exp dir")  # a space: the printed command quotes it
    monkeypatch.setattr(experiment_cmds, "run_experiment",
                        _stop_after_plan(seconds, out if kept else None))  # fmt: skip
    argv = ["experiment", "warmup", "--seeds", "2", "--out-dir", out]
    assert main(argv) == 130
    err = capsys.readouterr().err.splitlines()
    resume = shlex.join(["resgrad", *argv])
    plan = (f"resgrad experiment warmup: 3 runs of 9 steps: about 2.0 min; writes runs/, "
            f"cells.csv, summary.md and warmup.png in {out}; Ctrl-C keeps every finished "
            f"cell, and `{resume}` resumes")  # fmt: skip
    stop = (f"resgrad experiment warmup: interrupted; kept every finished cell in {out}; to "
            f"resume: {resume}" if kept else
            f"resgrad experiment warmup: interrupted; nothing was kept in {out}")  # fmt: skip
    # stderr is no terminal here: the plan is said all the same, when the work is long
    assert err == ([plan] if seconds > PROGRESS_AFTER_S else []) + [stop]
    assert shlex.split(resume)[1:] == argv  # the command printed reruns this one


def test_train_says_how_to_resume_from_its_last_checkpoint(capsys, monkeypatch, tmp_path):
    out = str(tmp_path / "run")

    def fake(cfg, *, plan=None, **kwargs):
        plan(60.0, "9 steps")
        os.makedirs(out)
        open(os.path.join(out, "last.ckpt"), "wb").close()
        raise KeyboardInterrupt

    monkeypatch.setattr(train_cmds, "train", fake)
    assert main(["train", "--max-iters", "9", "--out-dir", out]) == 130
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("resgrad train: 9 steps: about 1.0 min; writes ") and out in err[0]
    assert err[1] == (f"resgrad train: interrupted; kept the last checkpoint in {out}; to "
                      f"resume: resgrad train --out-dir {out} --resume")  # fmt: skip


def test_a_command_that_keeps_nothing_says_interrupted_alone(capsys, monkeypatch):
    def fake(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(lesson_cmds, "cmd_depth", fake)  # registered as main builds the parser
    assert main(["depth", "--depths", "2"]) == 130
    assert capsys.readouterr().err == "resgrad depth: interrupted\n"


def test_a_resumed_grid_plans_only_what_is_left():
    said = []
    ready = plan_left(lambda s, w: said.append((s, w)), 120.0, "12 models of 60 steps", "models")
    ready(12, 12)
    ready(3, 12)
    ready(0, 12)  # every model finished before: nothing to announce
    assert said == [(120.0, "12 models of 60 steps"),
                    (30.0, "3 of 12 models left; 12 models of 60 steps")]  # fmt: skip


def test_only_a_command_that_measures_says_its_estimates_off_a_terminal(tmp_path):
    """paths, lesion and flow turn the estimate line on for their process; a study, whose
    own plan speaks, and any other command leave it off (its measurements run by the
    hundred inside it)."""
    from resgrad.lab.study import budget

    assert main(["paths", "lesson", "--depth", "3"]) == 0
    assert budget._SPEAK["off_terminal"] is True
    assert main(["depth", "--depths", "2"]) == 0
    assert budget._SPEAK["off_terminal"] is False
    parser = build_parser()
    for argv in (["lesion", "lesson"], ["flow"], ["paths", "lesson"]):
        assert parser.parse_args(argv).measures is True
    for argv in (["experiment", "robustness"], ["train"], ["sweep", "--out", "x.csv"]):
        assert getattr(parser.parse_args(argv), "measures", False) is False
