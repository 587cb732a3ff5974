"""Sphinx configuration of resgrad's documentation.

Build it with ``pip install -e ".[docs]"`` and, from the repository root,

    sphinx-build -W --keep-going -b html docs docs/_build/html

``-W`` makes every warning an error: a broken reference, a page missing from the toctree,
a public function, class or method without a docstring (``_ext/apicheck.py``).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

import resgrad  # noqa: E402

project = "resgrad"
author = "resgrad developers"
copyright = "resgrad developers"
release = resgrad.__version__
version = release

extensions = [
    "myst_nb",  # MyST Markdown pages and notebooks/ (myst-nb brings myst-parser)
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",  # the docstrings are numpy style
    "sphinx.ext.mathjax",
    "sphinxarg.ext",  # the CLI reference, from resgrad.cli.build_parser
    "apicheck",  # _ext/apicheck.py: an undocumented public object, a name that is not, warn
    "sitepages",  # _ext/sitepages.py: commands searched by name, figures full size on click
    "refusals",  # _ext/refusals.py: the errors page lists the studies' refusals from the code
]

# .rst first: autosummary writes its generated API pages (api/generated/) in reST
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "_templates"]
templates_path = ["_templates"]

# -- MyST and the notebooks -------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
smartquotes = False  # a flag's "--" stays two hyphens, in the pages and in the CLI reference
myst_heading_anchors = 3  # [text](page.md#a-section-title) links to a section
# notebooks/ are stored without outputs (tests/test_notebooks.py runs them and holds that);
# the site shows them executed: run once per build into a cache under _build, and a cell
# that raises fails the build as a warning would
nb_execution_mode = "cache"
# an absolute path: a relative one is taken from the directory sphinx-build runs in (it
# left a _build/ at the repository's root)
nb_execution_cache_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_build",
                                       ".jupyter_cache")  # fmt: skip
nb_execution_timeout = 300  # seconds for one cell, as tests/test_notebooks.py allows
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
# no widget scripts from a CDN: the site runs no kernel, so a widget could only show its
# last state, and the page works offline (notebook 02 leaves its sliders' output off the
# page and draws a static grid of what they show instead)
nb_ipywidgets_js = {}

# -- the API reference ----------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
# every public member a module defines, __all__ or not; a reference to a constant (which
# autodoc shows only with a #: comment) links to its module's page (_ext/apicheck.py)
autodoc_default_options = {
    "members": True,
    "undoc-members": True,
    "ignore-module-all": True,
    "show-inheritance": True,
}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
numpydoc_show_class_members = False  # autodoc lists them, each with its docstring
numpydoc_xref_param_type = False  # types such as "(B, T, C) float array" stay text
numpydoc_class_members_toctree = False

# broken references are errors (-W), but for names of other projects, which have no
# inventory here (no network): their classes in signatures are left unlinked
nitpicky = True
EXTERNAL = [
    r"numpy|np|numpy\.typing|npt",
    r"os|io|contextlib|pathlib|typing|collections|abc|argparse|threading|concurrent|enum",
    r"dataclasses|matplotlib|mpl|tokenizers|filelock|joblib|dask|distributed|torch",
    r"transformers|safetensors|tqdm|tensorboardX|wandb|trackio",
]
BARE = [  # names in annotations without their module
    r"Path|PathLike|Callable|Iterable|Iterator|Sequence|Mapping|Any|ndarray|Generator",
    r"Figure|Axes|NamedTuple|BinaryIO|TextIO|IO|Self|Literal|Optional|Union",
    r"int|float|str|bool|bytes|dict|list|tuple|set|frozenset|object|type|None|complex",
]
_PY = r"py:(class|obj|data|exc|func|meth|attr)"
nitpick_ignore_regex = (
    [(_PY, rf"({names})(\..*)?") for names in EXTERNAL]
    + [(_PY, rf"({names})") for names in BARE]
    + [(r"py:class", r"\w+\[.*")]  # a piece of a subscripted annotation (dict[str, ...])
)

# -- HTML -----------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"resgrad {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "header_links_before_dropdown": 6,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_static_path = ["_static"]
html_css_files = ["resgrad.css"]  # wide code and tables scroll sideways; figures zoom on click
# the residual as an icon: the identity line, and a branch that rejoins it at a plus;
# favicon.ico at the site's root too, where a browser asks for it unprompted
html_favicon = "_static/favicon.png"
html_extra_path = ["_extra"]
# a topic's guide page before the API entries (Sphinx opens it from the working directory)
html_search_scorer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext", "scorer.js")
html_sidebars = {"index": [], "cli": [], "changelog": [], "notebooks": []}  # single pages
html_show_sourcelink = False

# -- the API's own checks (_ext/apicheck.py) ---------------------------------------------
undocumented_packages = [
    "resgrad.nn",
    "resgrad.verify",
    "resgrad.formats",
    "resgrad.plots",
    "resgrad.train",
    "resgrad.lab",
    "resgrad.perf",
]
# public methods that have no docstring yet: each entry goes once its docstring is written
undocumented_allowed = [
    "resgrad.nn.layers.Linear.backward",
    "resgrad.nn.layers.LayerNorm.backward",
    "resgrad.nn.layers.MLP.backward",
    "resgrad.nn.layers.CausalSelfAttention.backward",
    "resgrad.nn.residual.Module.forward",
    "resgrad.nn.residual.Module.backward",
    "resgrad.nn.residual.Residual.params",
    "resgrad.formats.events.EventFile.close",
    "resgrad.train.bpe.BPETokenizer.vocab_size",
    "resgrad.train.config.TrainConfig.schedule",
    "resgrad.train.config.TrainConfig.adamw",
    "resgrad.train.data.CharTokenizer.vocab_size",
    "resgrad.train.data.Corpus.sha256",
    "resgrad.train.dynamics.DynamicsWriter.append",
    "resgrad.train.dynamics.DynamicsWriter.close",
    "resgrad.train.dynamics.Dynamics.steps",
    "resgrad.train.sample.KVCache.empty",
    "resgrad.train.shards.Shards.close",
    "resgrad.train.trackers.Tracker.scalars",
    "resgrad.train.trackers.Tracker.histograms",
    "resgrad.train.trackers.Tracker.close",
    "resgrad.train.trackers.TensorBoard.scalars",
    "resgrad.train.trackers.TensorBoard.histograms",
    "resgrad.train.trackers.TensorBoard.close",
    "resgrad.train.trackers.WandbLike.scalars",
    "resgrad.train.trackers.WandbLike.histograms",
    "resgrad.train.trackers.WandbLike.close",
    "resgrad.lab.experiments.claims.ClaimRow.mean",
    "resgrad.lab.experiments.claims.ClaimRow.std",
    "resgrad.lab.experiments.depthtrain.DepthTrainConfig.train_config",
    "resgrad.lab.flow.core.FlowConfig.is_lesson",
    "resgrad.lab.flow.core.FlowRecord.as_dict",
    "resgrad.lab.lesion.interventions.Lesion.L",
    "resgrad.lab.lesson.StackProfile.input_grad_norm",
    "resgrad.perf.bench.BenchConfig.gpt_config",
    "resgrad.perf.bench.BenchConfig.tokens_per_step",
    "resgrad.perf.bench.StepFigures.as_dict",
]
