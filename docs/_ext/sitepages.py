"""A Sphinx extension for what a reader of the built site meets: search titles, figures,
and the notebooks' kernel.

1. The command-line reference's commands are found in search by their names.
   sphinx-argparse registers each subcommand as an object of its ``commands`` domain
   with the command's whole description as the object's display name, so a search for
   ``lesion`` listed a paragraph-long title with its quotes HTML-escaped. Each command's
   display name becomes the command itself (``resgrad lesion``).

2. Every figure opens full size on click. The guide's figures are drawn wide (the lesion
   page's have three panels), and the theme shrinks each to the column; each image that
   is not already a link becomes a link to its own file, as Sphinx does for a figure
   given a width (``html_scaled_image_link``).

3. Search lists each page once. A guide page's topic names are index entries at its top
   (its ``{index}`` line, target ``index-0``); search gave such an entry as a result of its
   own, with the anchor ``#index-0``, beside the page's own result for the same words, and
   Sphinx drops a result only where page, title and anchor all repeat. Those entries point
   at the page itself (no anchor), so the two are one result, the higher score kept.

4. The notebooks run in a kernel of the interpreter running the build. myst-nb starts
   the kernel named ``python3``, which is whatever that name is registered to on the
   machine, perhaps another environment with another resgrad. The build registers its
   own ``python3`` first on ``JUPYTER_PATH``, started by ``sys.executable``, with the
   kernel's own log at ERROR: its one warning, that a kernel on the loopback
   interface talks plain TCP, was printed once per notebook and concerns no page.
"""

from __future__ import annotations

import json
import os
import posixpath
import sys
import tempfile

from docutils import nodes
from sphinx.util.osutil import relative_uri

KERNEL_NAME = "python3"  # the name every notebook's metadata asks for


def _name_the_commands(app, env) -> None:
    """Each sphinx-argparse command's display name (the search result's title) is its name."""
    data = env.get_domain("commands").data  # sphinxarg.ext's ArgParseDomain
    # each entry: (command, display name, type, docname, anchor, priority)
    data["commands"] = [(cmd, cmd, *rest) for cmd, _desc, *rest in data["commands"]]
    for group, entries in data["commands-by-group"].items():
        data["commands-by-group"][group] = [(cmd, cmd, *rest) for cmd, _desc, *rest in entries]


def _link_figures(app, doctree, docname) -> None:
    """Wrap every image that is not already a link in a link to its own file."""
    if app.builder.format != "html":
        return
    imgpath = relative_uri(app.builder.get_target_uri(docname), "_images")
    for node in list(doctree.findall(nodes.image)):
        uri = node["uri"]
        if isinstance(node.parent, nodes.reference) or uri not in app.env.images:
            continue  # a link already, or not a file of the build (a data URI, a remote one)
        reference = nodes.reference("", "", internal=True, classes=["resgrad-figure-link"])
        reference["refuri"] = posixpath.join(imgpath, app.env.images[uri][1])
        node.replace_self(reference)
        reference.append(node)


TOP_INDEX = "index-0"  # the target of a page's first {index} line, under its title


def _one_result_per_page(app, exception) -> None:
    """Point each guide page's top index entries at the page, in the built search index."""
    path = os.path.join(app.outdir, "searchindex.js")
    if exception is not None or app.builder.format != "html" or not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    head, body, tail = (
        text[: text.index("(") + 1],
        text[text.index("(") + 1 : text.rindex(")")],
        text[text.rindex(")") :],
    )
    index = json.loads(body)
    guide = {i for i, d in enumerate(index["docnames"]) if d.startswith("guide/")}
    for entries in index["indexentries"].values():
        for e in entries:  # [file, target id, main]
            if e[0] in guide and e[1] == TOP_INDEX:
                e[1] = ""
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + json.dumps(index, separators=(",", ":")) + tail)


def _register_kernel(app) -> None:
    """A ``python3`` kernel spec of this interpreter, first on JUPYTER_PATH for the build."""
    home = tempfile.TemporaryDirectory(prefix="resgrad-docs-kernel-")
    app._resgrad_kernel_home = home  # removed with the build (build-finished)
    spec = os.path.join(home.name, "kernels", KERNEL_NAME)
    os.makedirs(spec)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
            "--IPKernelApp.log_level=ERROR"]  # fmt: skip
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": argv, "display_name": "Python 3 (the docs build)",
                   "language": "python"}, f)  # fmt: skip
    app._resgrad_jupyter_path = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        p for p in (home.name, app._resgrad_jupyter_path) if p
    )


def _unregister_kernel(app, exception) -> None:
    home = getattr(app, "_resgrad_kernel_home", None)
    if home is None:
        return
    previous = app._resgrad_jupyter_path
    if previous is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = previous
    home.cleanup()


def setup(app):
    app.connect("builder-inited", _register_kernel)
    app.connect("env-updated", _name_the_commands)
    app.connect("doctree-resolved", _link_figures)
    app.connect("build-finished", _one_result_per_page)
    app.connect("build-finished", _unregister_kernel)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
