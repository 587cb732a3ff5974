"""The topics of the user guide, once: each page, what it covers, and the commands it documents.

The README's topic table and the docs front page's guide table are written from
:data:`TOPICS` (``python scripts/topics.py`` rewrites both; tests/test_topics.py fails when
either differs, when the guide's table of contents lists other pages, or when a command of
``resgrad --help`` belongs to no topic), so that a new study cannot be added to one list and
missed in another.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    """One page of the user guide (``docs/guide/<page>.md``)."""

    page: str  # its file's stem
    title: str  # its heading
    covers: str  # what it covers, one line (Markdown)
    commands: tuple[str, ...] = ()  # the commands it documents (``experiment NAME`` for one)


TOPICS = (
    Topic("lesson", "The lesson", "`resgrad lesson`, the depth table, the exercises, the stack "
          "layer by layer", ("lesson", "depth", "gradcheck")),
    Topic("layers", "Layers, blocks and the GPT", "every forward/backward pair, the six "
          "residual schemes, the model"),
    Topic("gradcheck", "The gradient checker", "`check_gradients`, `resgrad check`, PyTorch as "
          "referee", ("check",)),
    Topic("flow", "Gradient flow", "per-layer profiles in every scheme, sweeps, what each "
          "scheme does and why", ("flow", "sweep")),
    Topic("training", "Training and sampling", "`resgrad train` and `sample`: data, "
          "checkpoints, resume, shards", ("train", "sample")),
    Topic("dashboards", "Watching a run", "per-block dynamics, warnings, pictures, "
          "TensorBoard, wandb, trackio", ("dynamics", "compare")),
    Topic("paths", "Gradient paths", "the gradient split exactly by path length, against "
          "Veit et al.", ("paths",)),
    Topic("lesion", "Lesion studies", "`resgrad lesion`: blocks deleted and swapped at test "
          "time, four schemes compared", ("lesion",)),
    Topic("robustness", "Equal-loss robustness", "`resgrad experiment robustness`: at equal "
          "loss, do shorter gradient paths make a GPT robust to a deleted block?",
          ("experiment robustness",)),
    Topic("pretrained", "GPT-2 and nanoGPT files", "what a SOURCE is, loading GPT-2 and "
          "`ckpt.pt`, a GPT-2 directory offline, export", ("export",)),
    Topic("experiments", "The papers' experiments", "`resgrad experiment`: the residual path, "
          "warm-up and depth, over seeds; DeepNet's and GPT-2's claims",
          ("experiment warmup", "experiment depth", "experiment residual", "depth-train",
           "claims")),
    Topic("performance", "Performance", "against nanoGPT end to end and PyTorch per "
          "iteration, the compiled kernels, on a loaded machine, generation, where the time "
          "goes, threads", ("bench",)),
    Topic("errors", "Errors", "what bad input, bad files and impossible sizes get, and what "
          "a command reads back"),
    Topic("development", "Development", "layout, tests, CI, mutants, benchmarks, the docs "
          "and their figures"),
)  # fmt: skip

# the site's pages beside the guide, listed after it in the README
REFERENCE = (
    ("the notebooks, rendered", "Notebooks", "docs/notebooks.md"),
    ("every command and flag, from the parser", "Command-line reference", "docs/cli.md"),
    ("every module, from the docstrings", "API reference", "docs/api/index.md"),
)


def readme_table() -> str:
    """The README's topic table: topic, then its page (and the site's reference pages)."""
    rows = [f"| {t.covers} | [{t.title}](docs/guide/{t.page}.md) |" for t in TOPICS]
    rows += [f"| {covers} | [{title}]({path}) |" for covers, title, path in REFERENCE]
    return "\n".join(["| topic | page |", "| --- | --- |", *rows]) + "\n"


def front_page_table() -> str:
    """The docs front page's guide table: page, then what it covers."""
    rows = [f"| [{t.title}](guide/{t.page}.md) | {t.covers} |" for t in TOPICS]
    return "\n".join(["| page | what it covers |", "| --- | --- |", *rows]) + "\n"


def commands() -> tuple[str, ...]:
    """Every command some topic documents, in the topics' order."""
    return tuple(c for t in TOPICS for c in t.commands)
