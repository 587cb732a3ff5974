"""The studies' refusals come from one place, :mod:`resgrad.lab.study.refusals`, and the
errors page lists every one of them from there.

- every module-level :class:`Refusal` is in ``ALL``, once, named by its key; each example
  makes its message from exactly the template's fields;
- no study module raises a message of its own (an AST scan of every ``raise``; a planted
  one is caught), and every refusal is used by one of them;
- the errors page lists every refusal once, through its ``refusals`` directive, in the
  order of ``ALL``, and still quotes, word for word, the lines it quoted by hand before;
- refusals raised for real, by the command line and the library, are exactly
  ``Refusal.message`` of the values of the situation (the examples' situations among them).
"""

import ast
import builtins
import importlib.util
import pathlib
import re
import string

import pytest

from resgrad.cli import main
from resgrad.lab import lesion
from resgrad.lab.study import refusals
from resgrad.lab.study.refusals import ALL, Refusal

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "resgrad"
# the modules that raise the studies' refusals: each raise is one of refusals.py's
SCOPE = sorted(
    [p for p in (SRC / "lab" / "study").glob("*.py") if p.name != "refusals.py"]
    + list((SRC / "lab" / "paths").glob("*.py"))
    + list((SRC / "lab" / "lesion").glob("*.py"))
    + [SRC / "lab" / "flow" / "study.py"]
    + [SRC / "cli" / f"{c}_cmds.py" for c in ("paths", "lesion", "flow")]
)
CONSTANTS = {n: v for n, v in vars(refusals).items() if isinstance(v, Refusal)}
PAGE = ROOT / "docs" / "guide" / "errors.md"

_spec = importlib.util.spec_from_file_location("ext", ROOT / "docs" / "_ext" / "refusals.py")
ext = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ext)


# -- one place ---------------------------------------------------------------------------


def test_every_refusal_is_in_all_once_named_by_its_key():
    assert len(ALL) >= 50
    assert len({id(r) for r in ALL}) == len(ALL), "a refusal is in ALL twice"
    assert {id(r) for r in CONSTANTS.values()} == {id(r) for r in ALL}, "a refusal not in ALL"
    assert len({r.key for r in ALL}) == len(ALL), "two refusals share a key"
    for name, r in CONSTANTS.items():
        assert r.key == name.lower().replace("_", "-"), name


@pytest.mark.parametrize("r", ALL, ids=[r.key for r in ALL])
def test_each_example_makes_its_message(r):
    fields = {f for _, f, _, _ in string.Formatter().parse(r.text) if f}
    assert set(r.example) == fields, "the example gives other values than the template's"
    message = r.message(**r.example)
    assert message and "\n" not in message and message == message.strip()
    assert r.study in {"budget", "windows", "runs", "paths", "lesion", "flow"}
    assert r.command in {"", "paths", "lesion", "flow"}
    # the command line turns ValueError and OSError into one line (resgrad.cli.main)
    assert issubclass(r.exc, (ValueError, OSError))
    err = r(**r.example)
    assert type(err) is r.exc and str(err) == message


def test_a_refusal_raises_its_exception_with_its_message():
    with pytest.raises(NotADirectoryError) as e:
        raise refusals.NOT_A_RUN_DIRECTORY(run="x.ckpt")
    assert str(e.value) == "'x.ckpt' is not a directory (expected a training run's)"
    with pytest.raises(KeyError):  # a field left out is an error, not a half message
        refusals.K_OUT_OF_RANGE(value=3)


BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items()
                      if isinstance(v, type) and issubclass(v, BaseException)}  # fmt: skip


def own_messages(source: str, names=frozenset(CONSTANTS)) -> list[str]:
    """Each ``raise`` of ``source`` that is not a refusal of ``names`` (or of a parameter
    ``refusal``) called, or that passes one a string of its own; a bare re-raise and the
    re-raise of a caught exception (``raise e``) are fine."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        exc = node.exc
        if isinstance(exc, ast.Name):  # raise e: fine; raise ValueError, raise NO_RUN: not
            ok = exc.id not in BUILTIN_EXCEPTIONS and exc.id not in names
        else:
            strings = (ast.Constant, ast.JoinedStr)
            ok = (isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name)
                  and (exc.func.id in names or exc.func.id == "refusal")
                  and not any(isinstance(a, strings) for a in exc.args))  # fmt: skip
        if not ok:
            out.append(f"line {node.lineno}: {ast.unparse(node)}")
    return out


@pytest.mark.parametrize("path", SCOPE, ids=[str(p.relative_to(SRC)) for p in SCOPE])
def test_no_study_module_raises_a_message_of_its_own(path):
    assert own_messages(path.read_text()) == []


def test_a_message_of_its_own_is_caught():
    """Not vacuous: a raise planted in a copy of a study module is found."""
    source = (SRC / "lab" / "study" / "windows.py").read_text()
    assert own_messages(source) == []
    anchor = "    if seq > cfg.block_size:\n"
    assert source.count(anchor) == 2
    for planted in ('raise ValueError(f"seq {seq} is too long")', 'raise TypeError("no")',
                    'raise SEQ_OVER_CONTEXT("seq too long")', "raise ValueError",
                    "raise SEQ_OVER_CONTEXT", 'raise self.error("no")'):  # fmt: skip
        bad = source.replace(anchor, f"    if seq < 0:\n        {planted}\n{anchor}", 1)
        assert len(own_messages(bad)) == 1, planted


def test_every_refusal_is_used_by_a_study_module():
    used = set()
    for path in SCOPE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                used.add(node.id)
    assert sorted(set(CONSTANTS) - used) == []


# -- the errors page -----------------------------------------------------------------------

# the lines the page quoted by hand before it listed them from refusals.py
QUOTED = [
    "resgrad paths: error: the lesson's stack of depth 20 (1 split and --veit 1,000,000,000 sampled paths per k) would take about 48.9 days (210,000,000,210 branch VJPs; an estimate), more than the budget of 10.0 min; pass --budget 5285841 to allow it, or ask for less",  # noqa: E501
    "resgrad paths: error: --seq 64 (the default) is longer than the model's 16 positions; pass --seq 16 or less",  # noqa: E501
    "resgrad paths: error: run 'B' has scheme post-ln, run 'A' has pre-ln: only runs of one model on one text are compared",  # noqa: E501
    "resgrad paths: error: run directory 'run/' is given twice; each run counts once",
    "resgrad lesion: error: k 21 is out of range; expected an integer in 1..20 (the model has L = 20 blocks)",  # noqa: E501
    "resgrad lesion: error: k 11 pairs swap 22 blocks but the model has L = 20; expected k in 1..10 with pairs (or leave pairs out of the interventions)",  # noqa: E501
    "resgrad lesion: error: --samples 10,001 is out of range; expected 1..10,000 random sets per k",
    "resgrad lesion: error: --sample-seed 4294967296 is out of range; expected a seed in [0, 2**32)",  # noqa: E501
    "resgrad lesion: error: block 20 does not exist: the model has blocks 0..19",
    "resgrad lesion: error: swap 19 needs blocks 19 and 20; the model has blocks 0..19 (swap takes i in 0..18)",  # noqa: E501
    "resgrad lesion: error: a swap needs two blocks; the model has L = 1 block",
    "resgrad lesion: error: unknown intervention 'attn' (the lesson's stack has one branch a layer); expected one of block, delete, swap, pairs",  # noqa: E501
    "resgrad lesion: error: the study would hold 212,621 interventions; expected at most 100,000: ask for fewer kinds, k or samples",  # noqa: E501
    "resgrad lesion: error: the text is 6 tokens; --seq 8 needs at least 9",
    "resgrad lesion: error: SOURCE 'lesson' is given twice; each model counts once",
    "resgrad lesion: error: 'lesson' is compared with nothing else: give it alone",
]

_DIRECTIVE = re.compile(r"^```\{refusals\}[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def page_directives(text: str) -> list[tuple[list[str] | None, bool]]:
    """(studies, library) of each ``refusals`` directive of a MyST page, in order."""
    out = []
    for m in _DIRECTIVE.finditer(text):
        options = dict(re.findall(r"^:([\w-]+):[ \t]*(.*)$", m.group(1), re.M))
        studies = [s.strip() for s in options.get("study", "").split(",") if s.strip()]
        out.append((studies or None, "library" in options))
    return out


def test_the_errors_page_lists_every_refusal_once_in_the_order_of_all():
    directives = page_directives(PAGE.read_text())
    assert len(directives) >= 4
    listed = [r for studies, library in directives for r in ext.select(studies, library)]
    assert [r.key for r in listed] == [r.key for r in ALL]
    rendered = "\n".join(ext.render(studies, library) for studies, library in directives)
    for r in ALL:
        assert r.message(**r.example) in rendered, r.key
    for line in QUOTED:  # word for word, as the page quoted them
        assert line in rendered.splitlines(), line


def test_a_refusal_missing_from_the_page_is_caught():
    """Not vacuous: a page without its lesion directives leaves refusals unlisted."""
    text = PAGE.read_text().replace("```{refusals}\n:study: lesion\n", "```text\n")
    directives = page_directives(text)
    listed = {r.key for studies, library in directives for r in ext.select(studies, library)}
    assert "k-out-of-range" not in listed and "no-rows" not in listed
    assert listed < {r.key for r in ALL}


def test_a_line_is_printed_as_its_command_prints_it():
    r = refusals.K_OUT_OF_RANGE
    assert ext.line(r) == f"resgrad lesion: error: {r.message(**r.example)}"
    assert ext.line(refusals.NO_RUN) == "no run to compare"
    assert ext.select(["no such study"]) == []


# -- for real ------------------------------------------------------------------------------


def _refused(argv, capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


# each refusal's example is a command's real situation: the command prints exactly it
EXAMPLES = [
    (["paths", "lesson", "--veit", "1000000000"], refusals.OVER_BUDGET),
    (["paths", "lesson", "--depth", "4097"], refusals.SPLIT_TOO_LARGE),
    (["paths", "run-a", "run-b"], refusals.SEVERAL_SOURCES),
    (["lesion", "lesson", "--k", "21"], refusals.K_OUT_OF_RANGE),
    (["lesion", "lesson", "--k", "11"], refusals.PAIRS_K_TOO_LARGE),
    (["lesion", "lesson", "--samples", "10001"], refusals.SAMPLES_OUT_OF_RANGE),
    (["lesion", "lesson", "--sample-seed", "4294967296"], refusals.SAMPLE_SEED_OUT_OF_RANGE),
    (["lesion", "lesson", "--blocks", "20"], refusals.NO_SUCH_BLOCK),
    (["lesion", "lesson", "--what", "swap", "--blocks", "19"], refusals.SWAP_PAST_TOP),
    (["lesion", "lesson", "--depth", "1", "--what", "swap"], refusals.SWAP_NEEDS_TWO),
    (["lesion", "lesson", "--what", "attn"], refusals.LESSON_INTERVENTION),
    (["lesion", "lesson", "--samples", "10000"], refusals.TOO_MANY_INTERVENTIONS),
    (["lesion", "lesson", "lesson"], refusals.SOURCE_GIVEN_TWICE),
    (["lesion", "lesson", "run-a"], refusals.LESSON_NOT_ALONE),
    (["lesion", "lesson", "--every-checkpoint"], refusals.EVERY_CHECKPOINT_LESSON),
    (["flow", "--text", "t.txt"], refusals.FLOW_TEXT_WITHOUT_MODEL),
    (["flow", "--meta", "meta.pkl"], refusals.FLOW_META_WITHOUT_MODEL),
    (["flow", "--every-checkpoint"], refusals.FLOW_EVERY_CHECKPOINT_WITHOUT_RUNS),
    (["flow", "--from-pretrained", "run-a"], refusals.FLOW_NEEDS_TEXT),
    (["flow", "--from-pretrained", "run-a", "run-b", "--text", "t.txt"],
     refusals.FLOW_SEVERAL_SOURCES),
]  # fmt: skip


@pytest.mark.parametrize("argv, r", EXAMPLES, ids=[r.key for _, r in EXAMPLES])
def test_a_command_prints_the_refusals_message(argv, r, capsys):
    assert r.command == argv[0]
    assert _refused(argv, capsys) == f"resgrad {r.command}: error: {r.message(**r.example)}\n"


def test_the_library_raises_the_refusals_message():
    with pytest.raises(ValueError) as e:
        lesion.plan(4, ks=[5])
    assert str(e.value) == refusals.K_OUT_OF_RANGE.message(value=5, lo=1, hi=4)
    with pytest.raises(ValueError) as e:
        lesion.swap_blocks(4, [(0, 1), (1, 2)])
    assert str(e.value) == refusals.PAIRS_NOT_DISJOINT.message(pairs=[(0, 1), (1, 2)])
    with pytest.raises(ValueError) as e:
        lesion.plan(6, what=["drop"])
    assert str(e.value) == refusals.UNKNOWN_INTERVENTION.message(
        what="drop", expected="attn, mlp, block, delete, swap, pairs")  # fmt: skip


FLAGS = ["--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
         "--batch-size", "4", "--warmup-iters", "1", "--lr-decay-iters", "6", "--lr", "1e-2",
         "--eval-iters", "1", "--eval-interval", "3", "--max-iters", "6", "--keep-every", "3",
         "--threads", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny runs that kept checkpoints, of one shape and two schemes, and their text."""
    d = tmp_path_factory.mktemp("refusals")
    text = d / "data.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    for name, extra in (("A", ["--seed", "1"]), ("D", ["--seed", "1", "--variant", "post-ln"])):
        argv = ["train", *FLAGS, *extra, "--data", str(text), "--out-dir", str(d / name)]
        assert main(argv) == 0
    return str(d / "A"), str(d / "D"), str(text)


def test_runs_refused_for_real(runs, tmp_path, capsys):
    a, d, text = runs
    m = ["--text", text, "--seq", "8", "--batch", "2", "--threads", "1"]
    unlike = {"kind": "run", "field": "scheme", "value": "post-ln", "first_value": "pre-ln"}
    err = _refused(["paths", a, d, "--every-checkpoint", *m], capsys)
    assert err == "resgrad paths: error: " + refusals.UNLIKE_RUNS.message(
        name=d, first=a, **unlike) + "\n"  # fmt: skip
    err = _refused(["lesion", a, d, *m], capsys)  # a table names a run by its directory
    assert err == "resgrad lesion: error: " + refusals.UNLIKE_RUNS.message(
        name="D", first="A", **unlike) + "\n"  # fmt: skip
    err = _refused(["paths", a, a + "/", "--every-checkpoint", *m], capsys)
    assert err == f"resgrad paths: error: {refusals.RUN_GIVEN_TWICE.message(run=a + '/')}\n"
    ckpt = f"{a}/last.ckpt"
    err = _refused(["paths", ckpt, "--every-checkpoint", *m], capsys)
    assert err == f"resgrad paths: error: {refusals.NOT_A_RUN_DIRECTORY.message(run=ckpt)}\n"
    short = tmp_path / "short.txt"
    short.write_text("the ox", encoding="utf-8")  # 6 characters, 6 tokens
    err = _refused(["lesion", a, "--text", str(short), "--seq", "8", "--threads", "1"], capsys)
    assert err == "resgrad lesion: error: " + refusals.TEXT_TOO_SHORT.message(
        **refusals.TEXT_TOO_SHORT.example) + "\n"  # fmt: skip
    err = _refused(["lesion", a, "--text", text, "--threads", "1"], capsys)  # --seq 64: default
    assert err == "resgrad lesion: error: " + refusals.SEQ_TOO_LONG.message(
        **refusals.SEQ_TOO_LONG.example) + "\n"  # fmt: skip
