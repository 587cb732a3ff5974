"""What the command line says about itself: --version, the bare command, the help texts,
and what `export` reports it wrote."""

import argparse
import os
import pathlib
import re

import pytest
import tomllib

import resgrad
from resgrad.cli import NO_COMMAND, build_parser, main
from resgrad.train.bpe import KINDS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _subparsers(parser):
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out, err = capsys.readouterr()
    assert out == f"resgrad {resgrad.__version__}\n" and err == ""


def test_the_version_is_the_one_pyproject_declares():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project.get("version")
    if declared is None:  # dynamic: read from resgrad.__version__ itself
        assert "version" in project["dynamic"]
    else:
        assert declared == resgrad.__version__


def test_the_bare_command_prints_usage_and_points_at_help(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    usage, error = err.splitlines()  # two lines: the usage, then one error line
    assert usage.startswith("usage: resgrad ") and "COMMAND" in usage
    assert error == f"resgrad: error: {NO_COMMAND}" and "resgrad --help" in error


def test_the_bare_command_through_the_interpreter(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "resgrad"], capture_output=True, text=True,
                       cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines()[0].startswith("usage: resgrad")
    assert "resgrad --help" in p.stderr and "Traceback" not in p.stderr


def _helps():
    """(command, flag, help) of every flag of every subcommand."""
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            if action.help and action.option_strings:
                yield name, action.option_strings[-1], action.help


def test_no_flag_states_its_default_twice():
    twice = [(c, f, h) for c, f, h in _helps() if h.count("(default:") > 1]
    assert twice == []


def test_sample_counts_tokens_not_characters():
    helps = {(c, f): h for c, f, h in _helps()}
    text = helps[("sample", "--num-tokens")]
    assert text.startswith("tokens to generate") and "BPE" in text


def test_train_is_not_called_character_level_and_lists_its_tokenizers():
    sub = _subparsers(build_parser())["train"]
    assert "character-level GPT" not in (sub.description or "")
    (action,) = (a for a in sub._actions if "--tokenizer" in a.option_strings)
    assert tuple(action.choices) == KINDS
    assert "{" + ",".join(KINDS) + "}" in sub.format_usage()


def test_every_subcommand_has_help_and_every_flag_a_help_text():
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert all(c.help for c in sub._choices_actions)  # the line `resgrad --help` shows
    missing = [(c, a.option_strings) for c, p in sub.choices.items() for a in p._actions
               if a.option_strings and a.help is None]  # fmt: skip
    assert missing == []


def test_export_reports_every_file_it_wrote(text_file, tmp_path, capsys):
    run, hf = tmp_path / "run", tmp_path / "hf"
    tiny = "--n-layer 1 --n-embd 8 --n-head 2 --block-size 8 --batch-size 2 --max-iters 1"
    tiny = [*tiny.split(), "--eval-interval", "1", "--eval-iters", "1"]
    assert main(["train", "--data", text_file, "--out-dir", str(run), *tiny]) == 0
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(run), "--out-dir", str(hf)]) == 0
    out = capsys.readouterr().out.strip()
    m = re.fullmatch(r"wrote (.+): (.+)", out)
    assert m and m[1] == str(hf), out
    written = sorted(os.listdir(hf))
    assert m[2].split(", ") == written
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(
        written
    )
