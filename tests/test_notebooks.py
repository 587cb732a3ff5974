"""Every notebook in notebooks/ runs top to bottom, and is stored without outputs.

Each notebook is executed with nbclient in a fresh ipykernel (a test extra) started by
the very interpreter running the tests: a kernel spec written for the test, not whatever
``python3`` kernel a machine has registered, which may belong to another environment. It
runs in the notebook's folder, with ``src/`` of this checkout first on ``PYTHONPATH``, so
the kernel imports the resgrad under test (not whichever one is installed). A cell that
raises fails the test, with the cell and the traceback in the message.

Notebooks are stored without outputs: the test runs them, so stored outputs could
only drift from what the code prints.
"""

import json
import os
import pathlib
import sys

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TIMEOUT = 300  # seconds for one cell; the longest (a few tiny training runs) takes ~15 s


KERNEL = "resgrad-test"


def execute(nb, monkeypatch, tmp_path, cwd=ROOT / "notebooks"):
    """Run ``nb`` in place in a fresh kernel on this checkout's resgrad; raise on any error."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))  # searched first
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    monkeypatch.setenv("PYTHONPATH", path)  # the kernel is a child process: it inherits this
    monkeypatch.setenv("MPLBACKEND", "Agg")  # as .ci/run sets it; %matplotlib inline overrides
    client = NotebookClient(
        nb,
        kernel_name=KERNEL,
        timeout=TIMEOUT,
        allow_errors=False,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    return nb


def outputs(nb, mime):
    """Every output of ``nb`` carrying ``mime``, as (cell index, data)."""
    return [
        (i, o["data"][mime])
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        for o in c.outputs
        if mime in o.get("data", {})
    ]


def widget_outputs(nb):
    """The outputs held by the notebook's Output widgets (what an interact callback drew)."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return [
        o
        for model in state.get("state", {}).values()
        if model["model_name"] == "OutputModel"
        for o in model["state"].get("outputs", [])
    ]


def test_there_are_notebooks():
    names = [p.name for p in NOTEBOOKS]
    assert names == [
        "01_residual_connections.ipynb",
        "02_gradient_flow_explorer.ipynb",
        "03_gradient_paths.ipynb",
        "04_lesion.ipynb",
        "05_equal_loss.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, f"{path.name}: cell {i}"
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, monkeypatch, tmp_path):
    nb = execute(nbformat.read(path, as_version=4), monkeypatch, tmp_path)
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert errors == []
    # the plots are drawn inline, as images: a reader without widgets still sees them
    assert len(outputs(nb, "image/png")) >= 2, path.name
    # an Output widget swallows its callback's exception into its own outputs: look there too
    drawn = widget_outputs(nb)
    assert [o for o in drawn if o.get("output_type") == "error"] == []
    if path.name.startswith("02_"):  # the explorer's widgets called explore_figure and drew
        assert any("image/png" in o.get("data", {}) for o in drawn)
        # ... and the static grid, which a page without a kernel shows, drew an image
        (grid,) = _grid_cells(nb)
        assert any("image/png" in o.get("data", {}) for o in nb.cells[grid].outputs), grid


EXPLORER = ROOT / "notebooks" / "02_gradient_flow_explorer.ipynb"


def _tags(cell):
    return cell.get("metadata", {}).get("tags", [])


def _grid_cells(nb):
    """The indices of the code cells that call explore_grid."""
    return [i for i, c in enumerate(nb["cells"])
            if c["cell_type"] == "code" and "explore_grid(" in "".join(c["source"])]  # fmt: skip


def test_the_explorers_widgets_are_left_off_the_page_and_a_static_grid_follows():
    """Where no kernel runs (the docs site), the sliders' cell shows nothing (its output
    removed by the ``remove-output`` tag) and a later cell draws their views as a grid."""
    nb = json.loads(EXPLORER.read_text())  # the file as stored, not nbformat's reading
    code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    (widgets,) = [i for i in code if "import ipywidgets" in "".join(nb["cells"][i]["source"])]
    assert "remove-output" in _tags(nb["cells"][widgets])
    grids = _grid_cells(nb)
    assert grids and all(i > widgets for i in grids), (widgets, grids)
    for i in grids:  # the grid is what the page shows: neither it nor its output removed
        assert not {"remove-output", "remove-cell"} & set(_tags(nb["cells"][i]))
        assert "import ipywidgets" not in "".join(nb["cells"][i]["source"])


def test_a_broken_cell_fails_the_run(monkeypatch, tmp_path):
    """Not vacuous: a copy of a notebook with a cell that raises makes execute() raise,
    and the kernel imports this checkout's resgrad."""
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(
        first_code + 1,
        nbformat.v4.new_code_cell(
            "import sys, resgrad\nprint(sys.executable)\nprint(resgrad.__file__)\n1 / 0"
        ),
    )
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        execute(nb, monkeypatch, tmp_path)
    printed = "".join(o.text for o in nb.cells[first_code + 1].outputs if o.output_type == "stream")
    executable, module = printed.split()
    assert executable == sys.executable  # the interpreter running the tests
    assert pathlib.Path(module).resolve() == ROOT / "src" / "resgrad" / "__init__.py"
    # the run stopped at the broken cell: nothing after it was executed
    assert all(
        c.execution_count is None for c in nb.cells[first_code + 2 :] if c.cell_type == "code"
    )
