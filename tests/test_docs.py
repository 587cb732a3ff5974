"""The documentation holds: its examples run, its commands parse, its figures are current.

- every ```python block in docs/ runs, in a fresh namespace in an empty directory (as
  tests/test_readme.py runs the README's);
- every ``resgrad ...`` line of a shell block in docs/ and the README parses with
  resgrad's own parser, with no ``...`` standing in for flags, so a renamed or removed
  flag fails here;
- every figure a page shows comes right after the shell block that draws it, and each one
  whose block runs in under a minute is drawn again from that block, in an empty
  directory, and compared with docs/images/ pixel for pixel (matplotlib's compare_images,
  tolerance 0), so a stale figure fails. The slow ones are listed, with why, in
  scripts/redraw_figures.py's SLOW, which redraws them all.

The pages are read by scripts/redraw_figures.py, the script that redraws the figures, so
that the tests and the script read the same commands.
"""

import importlib.util
import os
import pathlib
import re
import shutil
import sys

import pytest
from matplotlib.testing.compare import compare_images

from resgrad.cli import build_parser, main

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "redraw_figures", ROOT / "scripts" / "redraw_figures.py"
)
rf = importlib.util.module_from_spec(_spec)
sys.modules["redraw_figures"] = rf  # its dataclasses look their module up there
_spec.loader.exec_module(rf)

PYTHON = rf.blocks(ROOT, langs=("python",))
DOC_PYTHON = [b for b in PYTHON if b.path.startswith("docs/")]  # the README's: test_readme
SHELL = rf.blocks(ROOT)
COMMANDS = [(b, argv) for b in SHELL for argv in rf.commands(b)]
DRAWN = rf.figure_blocks(ROOT)
SHOWN = rf.figures_shown(ROOT)
FAST = sorted({bs[0] for name, bs in DRAWN.items() if name not in rf.SLOW}, key=lambda b: b.where)


# -- the Python examples ----------------------------------------------------------------


def test_the_docs_have_python_examples():
    assert len(DOC_PYTHON) >= 8


@pytest.mark.parametrize("block", DOC_PYTHON, ids=[b.where for b in DOC_PYTHON])
def test_docs_example_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(block.text, block.where, "exec"), {"__name__": "__docs__"})


def test_a_broken_docs_example_fails():
    """Not vacuous: a block with a wrong name or a failing assert raises."""
    text = "```python\nfrom resgrad import residual\nassert residual(1.0, abs) == 3.0\n```\n"
    (block,) = rf.fenced_blocks(text)
    with pytest.raises(AssertionError):
        exec(compile(block.text, block.where, "exec"), {})


# -- the commands -------------------------------------------------------------------------


def test_the_docs_and_readme_have_commands():
    assert len(COMMANDS) >= 40
    assert {argv[0] for _, argv in COMMANDS if argv} >= {"lesson", "train", "flow", "paths"}


def _parses(argv):
    """None if ``argv`` parses, else why not."""
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:  # --help and --version exit 0 once printed
        return None if e.code == 0 else f"exit {e.code}"
    return None


@pytest.mark.parametrize(
    "block, argv", COMMANDS, ids=[f"{b.where}:{' '.join(a[:2])}" for b, a in COMMANDS]
)
def test_docs_command_parses(block, argv, capsys):
    assert "..." not in " ".join(argv), f"{block.where}: a '...' placeholder in resgrad {argv}"
    if not argv:  # `resgrad` alone: its usage and a pointer to --help, by design
        assert main([]) == 2
        return
    why = _parses(argv)
    err = capsys.readouterr().err
    assert why is None, f"{block.where}: resgrad {' '.join(argv)}: {why}: {err}"


def test_a_bad_command_in_a_page_is_caught(capsys):
    """Not vacuous: a renamed flag, a bad value and a placeholder are each caught."""
    text = (
        "```bash\nresgrad depth --depht 20\nresgrad flow --variant pre-lm\n"
        "for v in pre-ln post-ln; do\n  resgrad train --variant $v --seed 1\ndone\n```\n"
        "```console\n$ resgrad sweep ... --init xavier\noutput: resgrad --nonsense\n```\n"
    )
    blocks = rf.fenced_blocks(text, "page.md")
    found = [argv for b in blocks for argv in rf.commands(b)]
    assert found == [
        ["depth", "--depht", "20"],
        ["flow", "--variant", "pre-lm"],
        ["train", "--variant", "pre-ln", "--seed", "1"],  # the loop's first value
        ["sweep", "...", "--init", "xavier"],  # the console's output line is not a command
    ]
    assert _parses(found[0]) and _parses(found[1]) and _parses(found[2]) is None
    assert "..." in found[3]
    capsys.readouterr()


# -- the figures ----------------------------------------------------------------------------


def test_every_image_is_shown_and_every_figure_shown_exists():
    files = {p.name for p in (ROOT / rf.IMAGES).iterdir() if p.suffix in (".png", ".svg")}
    assert files == set(SHOWN), "docs/images/ and the pages disagree"
    assert not list(ROOT.glob("docs/*.png")), "figures live in docs/images/"


def test_every_figure_stands_after_the_block_that_draws_it():
    """A figure is shown after its drawing block on the same page (the README after the
    very block of the guide page it borrows the figure from), and every block that draws a
    figure draws it the same way, into out/figures/, which git ignores."""
    for name, places in SHOWN.items():
        if name in rf.SCREENSHOTS:
            assert name in rf.SLOW
            continue
        assert name in DRAWN, f"{name}: no shell block writes {rf.FIGURES}{name}"
        texts = {b.text for b in DRAWN[name]}
        assert len(texts) == 1, f"{name} is drawn by different blocks: {DRAWN[name]}"
        for page, line in places:
            before = [b for b in DRAWN[name] if b.path == page and b.line < line]
            assert before, f"{page}:{line} shows {name} before (or without) its command"


def test_a_block_that_draws_makes_its_directory_first():
    """A reader runs the block in a fresh clone, where out/figures/ is not there yet."""
    mkdir = f"mkdir -p {rf.FIGURES.rstrip('/')}\n"
    for name, blocks in DRAWN.items():
        for b in blocks:
            assert mkdir in b.text, (b.where, name)
            assert b.text.index(mkdir) < b.text.index(rf.FIGURES), (b.where, name)


def test_the_slow_figures_are_listed_with_a_reason():
    assert set(rf.SLOW) <= set(SHOWN)
    assert all(isinstance(why, str) and why for why in rf.SLOW.values())
    # a block that draws a slow figure is not also drawn as a fast one
    slow_blocks = {b for n in rf.SLOW for b in DRAWN.get(n, [])}
    assert not slow_blocks & set(FAST)
    assert len(FAST) >= 5


def _differences(drawn, name):
    """compare_images at tolerance 0 against docs/images/NAME: None when equal."""
    return compare_images(str(ROOT / rf.IMAGES / name), str(drawn), tol=0)


@pytest.mark.parametrize("block", FAST, ids=[b.where for b in FAST])
def test_figure_is_what_its_command_draws_now(block, tmp_path):
    drawn = rf.run_block(block, tmp_path, timeout=900)  # under a minute on an idle machine
    stale = {}
    for name, path in drawn.items():
        if name in SHOWN:
            diff = _differences(path, name)
            if diff is not None:
                stale[name] = diff.splitlines()[1].strip()  # "RMS Value: ..."
    assert not stale, (
        f"{block.where}: {', '.join(stale)} differ from what the printed command draws now "
        f"({stale}); redraw them with python scripts/redraw_figures.py {' '.join(stale)}"
    )


def test_a_stale_figure_is_caught(tmp_path):
    """Not vacuous: the lesson's figure drawn from another depth is not the committed one."""
    (block,) = DRAWN["depth_per_layer.png"]
    changed = rf.Block(block.path, block.line, block.lang, block.text.replace("20", "19"))
    drawn = rf.run_block(changed, tmp_path, timeout=900)
    assert _differences(drawn["depth_per_layer.png"], "depth_per_layer.png") is not None


def test_redraw_script_copies_a_figure_into_place(tmp_path):
    """scripts/redraw_figures.py draws a figure from its page and writes it into
    docs/images/ of the tree it is given."""
    root = tmp_path / "tree"
    (root / "docs" / "guide").mkdir(parents=True)
    (root / "docs" / "images").mkdir()
    (root / "README.md").write_text("# x\n")
    shutil.copy(ROOT / "docs" / "guide" / "lesson.md", root / "docs" / "guide" / "lesson.md")
    assert rf.redraw(["depth_per_layer.png"], root) == ["depth_per_layer.png"]
    assert _differences(root / rf.IMAGES / "depth_per_layer.png", "depth_per_layer.png") is None


def test_pages_use_one_install_form_for_the_extras():
    """An optional extra is installed by name ("resgrad[tensorboard]") everywhere; only the
    development extras (test, docs) are installed from the clone, editable."""
    text = "\n".join(p.read_text() for p in rf.markdown_files(ROOT))
    from_clone = set(re.findall(r'pip install (?:-e )?"?\.\[(\w+)\]', text))
    assert from_clone <= {"test", "docs"}, from_clone


def test_the_readme_is_a_front_door():
    """At most 200 lines, and every page it links to exists."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    links = [m.split("#")[0] for m in re.findall(r"\]\(([^)\s]+)\)", text)]
    local = [link for link in links if "://" not in link]
    assert len(local) >= 12
    assert [link for link in local if not (ROOT / link).exists()] == []


# -- nothing written where the reader did not ask ---------------------------------------------

# where a command writes: its output flags (sample's --out-dir is the run it reads), the DIR
# of dynamics --export, and the default out-dir of the commands that have one not under out/
OUTPUT_FLAGS = ("--plot", "--out", "--log-dir")
DEFAULT_OUT = {"experiment": "out/experiment-{name}", "depth-train": "out/depth"}


def written_paths(argv: list[str]) -> list[str]:
    """The paths a resgrad command (its argv after ``resgrad``) writes, as typed."""
    if not argv:  # `resgrad` alone
        return []
    out, cmd = [], argv[0]
    for i, a in enumerate(argv[:-1]):
        if a in OUTPUT_FLAGS or (a == "--out-dir" and cmd != "sample"):
            out.append(argv[i + 1])
        if a == "--export" and i + 2 < len(argv) and not argv[i + 2].startswith("-"):
            out.append(argv[i + 2])
    if cmd in DEFAULT_OUT and "--out-dir" not in argv:
        out.append(DEFAULT_OUT[cmd].format(name=argv[1] if len(argv) > 1 else ""))
    return out


def copied_to(block) -> list[str]:
    """The destination of every ``cp`` in a shell block."""
    lines = [ln.split("#")[0].split() for ln in block.text.splitlines()]
    return [ln[-1] for ln in lines if ln[:1] == ["cp"]]


def _under_out(path: str) -> bool:
    norm = os.path.normpath(path)
    return norm == "out" or norm.startswith("out" + os.sep)


def test_every_printed_command_writes_under_out():
    """The README's tour and every guide command write into a directory they name under
    out/, which git ignores, never beside the reader's tracked files (docs/images/ included)."""
    bad = [(b.where, " ".join(argv), p) for b, argv in COMMANDS
           for p in written_paths(argv) if not _under_out(p)]  # fmt: skip
    bad += [(b.where, "cp", p) for b in SHELL for p in copied_to(b) if not _under_out(p)]
    assert bad == []
    assert "out/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_writing_rule_sees_every_way_of_writing():
    """Not vacuous: each way a command names what it writes is read."""
    assert written_paths(["flow", "--plot", "a.png"]) == ["a.png"]
    assert written_paths(["sweep", "--out", "s.csv", "--plot", "out/s.png"]) == [
        "s.csv",
        "out/s.png",
    ]
    assert written_paths(["train", "--out-dir", "run"]) == ["run"]
    assert written_paths(["sample", "--out-dir", "run", "--start", "x"]) == []
    assert written_paths(["dynamics", "out", "--export", "tensorboard", "tb"]) == ["tb"]
    assert written_paths(["experiment", "warmup", "--seeds", "2"]) == ["out/experiment-warmup"]
    block = rf.Block("x.md", 1, "bash", "resgrad train\ncp out/loss.png docs/images/x.png\n")
    assert copied_to(block) == ["docs/images/x.png"] and not _under_out("docs/images/x.png")
    assert _under_out("out/figures/x.png") and not _under_out("outside/x.png")
