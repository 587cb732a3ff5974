"""The command line stays thin: each ``src/resgrad/cli/*_cmds.py`` declares its flags and
calls the library, nothing more.

Held on the source's syntax tree: every command module is at most MAX_LINES lines; outside
its ``register*`` functions (which may build flags from a table) it has no loop or
comprehension (a loop over checkpoints, runs or rows is the library's) and no f-string with
a format spec (``{x:>8}``, ``{x:.4f}``: table formatting is the library's); and no function it
defines, but ``register`` and ``main``, is imported from anywhere else: what another module
needs belongs in the library.
"""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = ROOT / "src" / "resgrad" / "cli"
MAX_LINES = 150
SCANNED = ("src", "tests", "benchmarks", "scripts", "docs")  # where an importer may be
SHARED = ("register", "main")  # what one module may take from a command module
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp,
         ast.GeneratorExp)  # fmt: skip
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def command_modules(cli=CLI):
    return sorted(cli.glob("*_cmds.py"))


def _outside_register(tree):
    """Every node of ``tree`` but those inside a function whose name starts with register."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not (isinstance(child, FUNCTIONS) and child.name.startswith("register")):
                todo.append(child)


def too_long(paths, limit=MAX_LINES):
    """``'name: N lines'`` for each file of ``paths`` over ``limit`` lines."""
    counts = {p.name: len(p.read_text().splitlines()) for p in paths}
    return [f"{name}: {n} lines" for name, n in counts.items() if n > limit]


def loops_outside_register(path):
    """``'name:line: Kind'`` for every loop or comprehension outside ``register*``."""
    tree = ast.parse(path.read_text())
    found = sorted((n.lineno, type(n).__name__) for n in _outside_register(tree)
                   if isinstance(n, LOOPS))  # fmt: skip
    return [f"{path.name}:{line}: {kind}" for line, kind in found]


def _literal_spec(node):
    """Whether ``node`` formats with a spec other than an f-string's: ``"{:>8}".format(x)``,
    ``"%8.3f" % x`` or ``format(x, ".2f")``."""
    if not isinstance(node, (ast.Call, ast.BinOp)):
        return False
    if isinstance(node, ast.BinOp):
        left = node.left
        return (isinstance(node.op, ast.Mod) and isinstance(left, ast.Constant)
                and isinstance(left.value, str)
                and re.search(r"%[-+ #0]*(\d+|\*)?(\.\d+)?[diouxXeEfFgGcrsa]", left.value)
                is not None)  # fmt: skip
    f = node.func
    if isinstance(f, ast.Name) and f.id == "format":
        return len(node.args) > 1
    return (isinstance(f, ast.Attribute) and f.attr == "format"
            and isinstance(f.value, ast.Constant) and isinstance(f.value.value, str)
            and re.search(r"{[^{}]*:[^{}]+}", f.value.value) is not None)  # fmt: skip


def format_specs_outside_register(path):
    """``'name:line'`` for every value formatted with a spec (an f-string's ``{x:>8}``, or
    the same through ``str.format``, ``%`` or ``format``) outside ``register*``."""
    tree = ast.parse(path.read_text())
    found = [n for n in _outside_register(tree)
             if (isinstance(n, ast.FormattedValue) and n.format_spec is not None)
             or _literal_spec(n)]  # fmt: skip
    return [f"{path.name}:{line}" for line in sorted({n.lineno for n in found})]


def _defined(path):
    """The functions and classes a module defines at its top level."""
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (*FUNCTIONS, ast.ClassDef))}


_DOTTED = re.compile(r"\bresgrad\.cli\.(\w+)[.:](\w+)")
_FROM = re.compile(r"\bfrom\s+resgrad\.cli\.(\w+)\s+import\s+\(?([\w\s,]+)")


def _taken_in_python(text):
    """(module, name) of every ``resgrad.cli.<module>.<name>`` a Python file uses: imported
    by name, read as an attribute of the imported module, or named in a string (a
    monkeypatch target)."""
    tree = ast.parse(text)
    aliases = {}  # local name -> cli module
    taken = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("resgrad.cli."):
                mod = node.module.split(".")[2]
                taken |= {(mod, a.name) for a in node.names}
            elif node.module == "resgrad.cli":
                aliases |= {a.asname or a.name: a.name for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            taken |= set(_DOTTED.findall(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id in aliases:
                taken.add((aliases[base.id], node.attr))
            elif ast.unparse(base).startswith("resgrad.cli."):  # import resgrad.cli.x
                taken.add((ast.unparse(base).split(".")[2], node.attr))
    return taken


def _taken_in_text(text):
    """(module, name) of every ``resgrad.cli.<module>.<name>`` and ``from resgrad.cli.<module>
    import <names>`` a document names."""
    taken = set(_DOTTED.findall(text))
    for mod, names in _FROM.findall(text):
        taken |= {(mod, n) for n in re.findall(r"\w+", names)}
    return taken


def taken_from_commands(cli=CLI, roots=None, exclude=None):
    """``'file: module.name'`` for every function or class defined in a command module of
    ``cli`` (but SHARED) that a file under ``roots`` (default: SCANNED under the project)
    takes; files under ``exclude`` (default: ``cli`` itself) are not read."""
    roots = [ROOT / r for r in SCANNED] if roots is None else roots
    exclude = cli if exclude is None else exclude
    defs = {p.stem: _defined(p) - set(SHARED) for p in command_modules(cli)}
    bad = []
    for root in roots:
        for path in sorted(root.rglob("*") if root.is_dir() else []):
            if not path.is_file() or path.is_relative_to(exclude):
                continue
            if "__pycache__" in path.parts or path.suffix not in (".py", ".md", ".rst", ".txt"):
                continue
            text = path.read_text(errors="replace")
            try:
                taken = _taken_in_python(text) if path.suffix == ".py" else _taken_in_text(text)
            except SyntaxError:
                taken = _taken_in_text(text)
            bad += [f"{path.relative_to(root.parent)}: {m}.{n}" for m, n in sorted(taken)
                    if n in defs.get(m, ())]  # fmt: skip
    return bad


def taken_between_commands(cli=CLI):
    """``'module: other.name'`` for every function or class a command module takes from
    another (but SHARED): what two commands need belongs in the library (or in the CLI's
    shared module, ``_common``)."""
    defs = {p.stem: _defined(p) - set(SHARED) for p in command_modules(cli)}
    bad = []
    for path in command_modules(cli):
        taken = _taken_in_python(path.read_text())
        bad += [f"{path.name}: {m}.{n}" for m, n in sorted(taken)
                if m != path.stem and n in defs.get(m, ())]  # fmt: skip
    return bad


def test_there_are_command_modules():
    names = {p.name for p in command_modules()}
    assert {"lesson_cmds.py", "train_cmds.py", "lab_cmds.py"} <= names, names


def test_every_command_module_is_short():
    assert too_long(command_modules()) == []


def test_no_loop_outside_register():
    found = [f for p in command_modules() for f in loops_outside_register(p)]
    assert found == []


def test_no_table_formatting_outside_register():
    found = [f for p in command_modules() for f in format_specs_outside_register(p)]
    assert found == []


def test_no_function_of_a_command_module_is_taken_outside_the_cli():
    assert taken_from_commands() == []


def test_no_command_module_takes_a_function_from_another():
    assert taken_between_commands() == []


def test_the_checks_are_not_vacuous(tmp_path):
    """A command module with a loop over rows formatting a table, taken by a test, fails
    every check; the one it was copied from passes."""
    cli = tmp_path / "src" / "resgrad" / "cli"
    cli.mkdir(parents=True)
    src = (CLI / "lesson_cmds.py").read_text()
    (cli / "lesson_cmds.py").write_text(src)
    bad = cli / "bad_cmds.py"
    bad.write_text(
        src
        + "\n\ndef render(rows):\n"
        + "    lines = []\n"
        + "    for r in rows:\n"
        + '        lines.append(f"{r.depth:>8} | {r.no_residual:.4f}")\n'
        + '    return "\\n".join(lines) + "{:>8}".format(len(rows))\n'
        + "\n\ndef depths(rows):\n"
        + "    return [r.depth for r in rows]\n"
        + "\n\ndef register_more(sub):\n"
        + "    for flag in ('--a', '--b'):  # a table of flags: allowed here\n"
        + '        print(f"{flag:>8}")\n'
        + "\n" * MAX_LINES
    )
    other = cli / "other_cmds.py"
    other.write_text("from resgrad.cli import bad_cmds\n\nrender = bad_cmds.render\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    module = ".".join(["resgrad", "cli", "bad_cmds"])  # not a real import of this file
    (tests / "test_x.py").write_text(
        f"from {module} import depths, register\n\n"
        f"def test(monkeypatch):\n    monkeypatch.setattr('{module}.render', None)\n"
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text(f"`{module}.register` and `{module}.depths`\n")

    n = len(src.splitlines())  # the copy's lines; what was added follows
    assert too_long(command_modules(cli)) == [f"bad_cmds.py: {len(bad.read_text().splitlines())} "
                                              "lines"]  # fmt: skip
    assert loops_outside_register(bad) == [f"bad_cmds.py:{n + 5}: For",
                                           f"bad_cmds.py:{n + 11}: ListComp"]  # fmt: skip
    assert format_specs_outside_register(bad) == [f"bad_cmds.py:{n + 6}", f"bad_cmds.py:{n + 7}"]
    roots = [tmp_path / "tests", tmp_path / "docs", tmp_path / "src"]
    assert taken_from_commands(cli, roots) == [
        "tests/test_x.py: bad_cmds.depths",
        "tests/test_x.py: bad_cmds.render",
        "docs/x.md: bad_cmds.depths",
    ]
    assert taken_between_commands(cli) == ["other_cmds.py: bad_cmds.render"]
    good = cli / "lesson_cmds.py"
    assert loops_outside_register(good) == format_specs_outside_register(good) == []
    assert too_long([good]) == []
