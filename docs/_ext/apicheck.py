"""A Sphinx extension that holds the API reference to two rules, with ``-W`` as errors.

1. Every public function, class and method of resgrad has a docstring.

autodoc leaves out, without a word, a member that has no docstring; this extension warns
about each instead (so ``sphinx-build -W`` fails). It walks the packages that the API
reference documents (``undocumented_packages`` in conf.py) and, in each module, the public
functions and classes it defines (every name without a leading underscore, as the API
pages show them), and the public methods and properties of its classes.
A method that overrides a documented one inherits its docstring, as autodoc shows it.

``undocumented_allowed`` in conf.py lists the dotted names that may lack one for now; an
entry that has a docstring by now, or names nothing, warns too, so the list only shrinks.

2. A cross-reference in a docstring or a page names something that exists. A reference
that Sphinx cannot resolve, but that names a real object of resgrad (a module constant,
which autodoc leaves out without a ``#:`` comment, a private helper, or a class named as
the module that uses it imports it), links to the nearest documented object that holds
it (its class, or its module's page). A name that does not exist stays a warning.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from sphinx.util import logging

logger = logging.getLogger(__name__)


def _modules(packages):
    """The dotted names of ``packages`` and of every module below them."""
    for name in packages:
        pkg = importlib.import_module(name)
        yield name
        if hasattr(pkg, "__path__"):
            for m in pkgutil.walk_packages(pkg.__path__, name + "."):
                yield m.name


def _public(module):
    """(name, object) of the public functions and classes that ``module`` defines: every
    name without a leading underscore, in ``__all__`` or not, as the API pages show them."""
    for n in [n for n in vars(module) if not n.startswith("_")]:
        obj = getattr(module, n, None)
        is_def = inspect.isfunction(obj) or inspect.isclass(obj)
        if is_def and getattr(obj, "__module__", None) == module.__name__:
            yield n, obj


def _where(obj):
    """The ``file:line`` of ``obj``'s definition, for the warning."""
    try:
        return f"{inspect.getsourcefile(obj)}:{inspect.getsourcelines(obj)[1]}"
    except (OSError, TypeError):
        return None


def undocumented(packages):
    """(dotted name, location) of every public object of ``packages`` without a docstring."""
    missing = []
    for modname in _modules(packages):
        module = importlib.import_module(modname)
        if not (module.__doc__ or "").strip():
            missing.append((modname, _where(module)))
        for name, obj in _public(module):
            dotted = f"{modname}.{name}"
            if not (inspect.getdoc(obj) or "").strip():
                missing.append((dotted, _where(obj)))
            if not inspect.isclass(obj):
                continue
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                fn = member.fget if isinstance(member, property) else member
                if isinstance(fn, (classmethod, staticmethod)):
                    fn = fn.__func__
                if not inspect.isfunction(fn):
                    continue  # a field, a constant: no docstring of its own to ask for
                if not (inspect.getdoc(getattr(obj, attr)) or "").strip():
                    missing.append((f"{dotted}.{attr}", _where(fn)))
    return missing


def check(app):
    allowed = set(app.config.undocumented_allowed)
    found = undocumented(app.config.undocumented_packages)
    for dotted, where in found:
        if dotted not in allowed:
            logger.warning(f"{dotted} is public and has no docstring", location=where)
    for dotted in sorted(allowed - {d for d, _ in found}):
        logger.warning(
            f"undocumented_allowed lists {dotted}, which has a docstring now (or is gone): "
            "remove it from the list in docs/conf.py"
        )


def _lookup(dotted):
    """The object that ``dotted`` names (a module, then attributes), or None."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _candidates(node):
    """The dotted names a py reference may mean: in its class, its module, or absolute."""
    target = node["reftarget"].lstrip("~.")
    module, cls = node.get("py:module"), node.get("py:class")
    names = []
    if module and cls:
        names.append(f"{module}.{cls}.{target}")
    if module:
        names.append(f"{module}.{target}")
    names.append(target)
    return names


def _canonical(dotted, obj):
    """Where ``obj`` is defined (``module.Qual.name``), for a class or function."""
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qual, str) and "<" not in qual:
        return f"{module}.{qual}"
    return dotted


def resolve(app, env, node, contnode):
    """Link a py reference to a real resgrad object that has no entry of its own to the
    nearest documented object above it, or to the one documented object of the role's
    kind whose name ends with it; leave anything else unresolved (a warning)."""
    if node.get("refdomain") != "py":
        return None
    from sphinx.util.nodes import make_refnode

    objects = env.get_domain("py").objects
    for dotted in _candidates(node):
        if not dotted.startswith("resgrad"):
            continue
        obj = _lookup(dotted)
        if obj is None:
            continue
        name = _canonical(dotted, obj)
        parts = name.split(".")
        for i in range(len(parts), 1, -1):
            entry = objects.get(".".join(parts[:i]))
            if entry is not None:
                return make_refnode(app.builder, node["refdoc"], entry.docname,
                                    entry.node_id, contnode, name)  # fmt: skip
    # a summary line shown out of its module's context (autosummary), or a short name: the
    # one documented object of the role's kind (a function for :func:) whose name ends so
    target = node["reftarget"].lstrip("~.")
    kinds = set(env.get_domain("py").objtypes_for_role(node["reftype"]) or ())
    ends = [k for k, e in objects.items() if k.startswith("resgrad.")
            and k.endswith("." + target) and (not kinds or e.objtype in kinds)]  # fmt: skip
    if len(ends) == 1:
        entry = objects[ends[0]]
        return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id,
                            contnode, ends[0])  # fmt: skip
    return None


def drop_field_aliases(app, what, name, obj, options, lines):
    """A NamedTuple field's own docstring, "Alias for field number N", says nothing: drop it."""
    if len(lines) == 1 and lines[0].startswith("Alias for field number"):
        lines.clear()


def setup(app):
    app.add_config_value("undocumented_packages", [], "env")
    app.add_config_value("undocumented_allowed", [], "env")
    app.connect("builder-inited", check)
    app.connect("missing-reference", resolve)
    app.connect("autodoc-process-docstring", drop_field_aliases)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
