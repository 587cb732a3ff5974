"""Redraw the documentation's figures from the commands printed beside them.

Every figure in ``docs/images/`` is shown in a page (or the README) right after the shell
block that draws it: a block of ``resgrad`` commands (and a ``cp`` where a command writes
its figure into its own output directory) whose output path is ``out/figures/NAME``, under
the ``out/`` that git ignores, so that a reader who runs the block in a clone writes
nothing git tracks (the block makes the directory first: ``mkdir -p out/figures``). This
script runs that block, as it is printed, with bash in an empty directory, and copies what
it drew into ``docs/images/``. ``tests/test_docs.py`` uses the same reading of the pages to
redraw the fast figures and compare them with the ones committed, so a figure cannot go
stale; the slow ones (``SLOW``) are redrawn only here.

    python scripts/redraw_figures.py                    # every figure, slow ones included
    python scripts/redraw_figures.py --fast             # the ones the tests compare
    python scripts/redraw_figures.py flow_schemes.png   # one figure (and its block's others)
    python scripts/redraw_figures.py --list             # each figure, its page and its block

``tensorboard.png`` is a screenshot: its block trains the run, then TensorBoard serves it
on 127.0.0.1 and headless Chromium photographs the Custom Scalars tab.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = "docs/images/"  # where every figure lives
FIGURES = "out/figures/"  # where the commands beside a figure write it
SHELL_LANGS = ("", "bash", "sh", "shell", "console")

# figures whose block takes a minute or more: redrawn here, never by the tests
SLOW = {
    "train_loss.png": "the CPU recipe, 2000 steps (about 90 s on 2 cores)",
    "experiment_residual.png": "resgrad experiment residual (about 10 min on 2 cores)",
    "dynamics_none.png": "a cell of resgrad experiment residual (about 10 min)",
    "compare_residual.png": "two cells of resgrad experiment residual (about 10 min)",
    "experiment_warmup.png": "resgrad experiment warmup (about 12 min on 2 cores)",
    "experiment_depth.png": "resgrad experiment depth (about 10 min on 2 cores)",
    "tensorboard.png": "a screenshot of TensorBoard after a 600-step run (about 1 min)",
    # each: 3 x resgrad train --variant V (12 layers, 300 steps), then resgrad lesion of the 3
    "lesion_pre_ln.png": "3 pre-ln trainings + resgrad lesion (30 s idle, minutes loaded)",
    "lesion_post_ln.png": "3 post-ln trainings + resgrad lesion (30 s idle, minutes loaded)",
    "lesion_deepnorm.png": "3 deepnorm trainings + resgrad lesion (30 s idle, minutes loaded)",
    "lesion_none.png": "3 none trainings + resgrad lesion (30 s idle, minutes loaded)",
    "robustness.png": "resgrad experiment robustness: 48 models trained and read (minutes)",
}
SCREENSHOTS = {"tensorboard.png": "out/run"}  # figure -> the run directory its block trains


@dataclass(frozen=True)
class Block:
    """A fenced code block of a Markdown file: where it starts, its language, its text."""

    path: str  # relative to the repository root
    line: int  # the line of its first content line
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def markdown_files(root: Path = ROOT) -> list[Path]:
    """The README and every page of the docs' source (not the build, not generated pages)."""
    docs = root / "docs"
    pages = [
        p
        for p in sorted(docs.rglob("*.md"))
        if not {"_build", "generated", "notebooks"} & set(p.relative_to(docs).parts)
    ]
    return [root / "README.md", *pages]


_FENCE = re.compile(r"^(`{3,})([\w-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)


def fenced_blocks(text: str, path: str = "<text>") -> list[Block]:
    """Every fenced block of a Markdown text, in order."""
    return [
        Block(path, text.count("\n", 0, m.start()) + 2, m[2].lower(), m[3])
        for m in _FENCE.finditer(text)
    ]


def blocks(root: Path = ROOT, langs=SHELL_LANGS) -> list[Block]:
    """The fenced blocks in ``langs`` of the README and the docs."""
    out = []
    for p in markdown_files(root):
        rel = p.relative_to(root).as_posix()
        out += [b for b in fenced_blocks(p.read_text(), rel) if b.lang in langs]
    return out


def _logical_lines(block: Block) -> list[str]:
    """The block's command lines: continuations joined; in a console block, only the
    lines after a ``$`` prompt (the rest is output)."""
    lines, cur, prompt = [], "", block.lang == "console"
    for raw in block.text.splitlines():
        if prompt and not cur:
            if not raw.startswith("$ "):
                continue  # output
            raw = raw[2:]
        if raw.rstrip().endswith("\\"):
            cur += raw.rstrip()[:-1] + " "
            continue
        lines.append(cur + raw)
        cur = ""
    if cur:
        lines.append(cur)
    return lines


_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")"}
_KEYWORDS = {"do", "done", "then", "fi", "else"}


def commands(block: Block) -> list[list[str]]:
    """The argv (after ``resgrad``) of every resgrad command in a shell block. A loop
    variable (``for v in pre-ln post-ln; do ... $v``) stands for its first value."""
    found, bound = [], {}
    for line in _logical_lines(block):
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lex.whitespace_split = True
        lex.commenters = "#"
        try:
            tokens = list(lex)
        except ValueError as e:  # unbalanced quotes: not a shell line a reader could run
            raise ValueError(f"{block.where}: {e} in {line!r}") from None
        segment: list[str] = []
        for tok in [*tokens, ";"]:
            if tok not in _SEPARATORS:
                segment.append(tok)
                continue
            while segment and segment[0] in _KEYWORDS:
                segment.pop(0)
            if segment[:1] == ["for"] and len(segment) >= 4 and segment[2] == "in":
                bound[segment[1]] = segment[3]
            elif segment[:1] == ["resgrad"]:
                argv = segment[1:]
                for name, value in bound.items():
                    argv = [re.sub(rf"\$\{{?{name}\}}?(?!\w)", value, a) for a in argv]
                found.append(argv)
            segment = []
    return found


def figures_drawn(block: Block) -> list[str]:
    """The names of the figures a shell block writes into out/figures/."""
    if block.lang == "console":
        return []  # a transcript, not a recipe
    names = re.findall(rf"(?<![\w/.]){re.escape(FIGURES)}([\w.-]+\.(?:png|svg))", block.text)
    return list(dict.fromkeys(names))


_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def figures_shown(root: Path = ROOT) -> dict[str, list[tuple[str, int]]]:
    """Image name -> where a page (or the README) shows it, as (file, line)."""
    shown: dict[str, list[tuple[str, int]]] = {}
    for p in markdown_files(root):
        text, rel = p.read_text(), p.relative_to(root).as_posix()
        for m in _IMAGE.finditer(text):
            name = m[1].rsplit("/", 1)[-1]
            shown.setdefault(name, []).append((rel, text.count("\n", 0, m.start()) + 1))
    return shown


def figure_blocks(root: Path = ROOT) -> dict[str, list[Block]]:
    """Figure name -> every shell block that draws it, in reading order."""
    out: dict[str, list[Block]] = {}
    for b in blocks(root):
        for name in figures_drawn(b):
            out.setdefault(name, []).append(b)
    return out


def run_block(block: Block, workdir: Path, timeout: float | None = None) -> dict[str, Path]:
    """Run a block with bash in ``workdir``; the figures it drew (in its out/figures/)."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=workdir, env=env,
                       capture_output=True, text=True, timeout=timeout)  # fmt: skip
    if p.returncode != 0:
        raise RuntimeError(f"{block.where}: the block exited {p.returncode}:\n{p.stderr[-3000:]}")
    return {n: workdir / FIGURES / n for n in figures_drawn(block)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def screenshot_tensorboard(
    workdir: Path, logdir: str, out: Path, size=(1144, 828), scale=0.7, wait_s=60.0
) -> None:
    """TensorBoard's Custom Scalars tab for ``logdir`` (relative to ``workdir``, as the page
    names it), photographed by headless Chromium: ``size`` pixels of a page laid out
    ``1 / scale`` times wider, so that three charts stand side by side."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None or shutil.which("tensorboard") is None:
        raise RuntimeError("a screenshot needs tensorboard and chromium on PATH")
    port = _free_port()
    tb = subprocess.Popen(["tensorboard", "--logdir", logdir, "--host", "127.0.0.1",
                           "--port", str(port)], cwd=workdir, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)  # fmt: skip
    css = (round(size[0] / scale), round(size[1] / scale))
    try:
        url, deadline = f"http://127.0.0.1:{port}/", time.monotonic() + wait_s
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"TensorBoard did not answer on {url}") from None
                time.sleep(0.5)
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--no-first-run", "--hide-scrollbars",
                        f"--window-size={css[0]},{css[1]}", f"--force-device-scale-factor={scale}",
                        "--virtual-time-budget=20000",
                        f"--screenshot={out}", url + "#custom_scalars"],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
    finally:
        tb.terminate()
        tb.wait(timeout=30)


def redraw(names: list[str], root: Path = ROOT) -> list[str]:
    """Run the block of each figure in ``names`` once, in a fresh directory, and copy what
    it drew into docs/images/ (each copy written whole: a temporary, then a rename)."""
    by_name, done = figure_blocks(root), []
    for name in names:
        if name in done:
            continue
        if name in SCREENSHOTS and name not in by_name:
            block = _screenshot_block(name, root)
        elif name in by_name:
            block = by_name[name][0]
        else:
            raise SystemExit(f"redraw_figures: no block in the docs draws {name!r}")
        with tempfile.TemporaryDirectory(prefix="redraw-") as tmp:
            work = Path(tmp)
            print(f"{block.where}: drawing {name} ...", flush=True)
            t0 = time.monotonic()
            drawn = run_block(block, work)
            if name in SCREENSHOTS and name not in drawn:
                drawn[name] = work / FIGURES / name
                drawn[name].parent.mkdir(parents=True, exist_ok=True)
                screenshot_tensorboard(work, f"{SCREENSHOTS[name]}/tb", drawn[name])
            for n, path in drawn.items():
                dest = root / IMAGES / n
                shutil.copyfile(path, dest.with_suffix(".tmp"))
                os.replace(dest.with_suffix(".tmp"), dest)
                done.append(n)
                print(f"  {dest.relative_to(root)} ({time.monotonic() - t0:.0f} s)")
    return done


def _screenshot_block(name: str, root: Path) -> Block:
    """The shell block just before the screenshot ``name`` on its page: the run it shows."""
    (page, line), *_ = figures_shown(root)[name]
    before = [b for b in blocks(root) if b.path == page and b.line < line]
    if not before:
        raise SystemExit(f"redraw_figures: {page} shows {name} after no shell block")
    return before[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="figures to redraw (default: every one)")
    ap.add_argument("--fast", action="store_true", help="only those the tests compare")
    ap.add_argument("--list", action="store_true", help="list the figures and their blocks")
    args = ap.parse_args(argv)
    shown = figures_shown()
    everything = sorted(n for n in shown if (ROOT / IMAGES / n).exists())
    if args.list:
        by_name = figure_blocks()
        for n in everything:
            where = by_name[n][0].where if n in by_name else "(screenshot)"
            print(f"{n:28} {where:34} {SLOW.get(n, 'fast: compared by tests/test_docs.py')}")
        return 0
    unknown = [n for n in args.names if n not in shown]
    if unknown:
        print(f"redraw_figures: no page shows {', '.join(unknown)}", file=sys.stderr)
        return 2
    names = args.names or [n for n in everything if not (args.fast and n in SLOW)]
    redraw(names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
