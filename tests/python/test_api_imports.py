"""The pe Python package's modules import each other without a cycle.

Every module of bindings/python/pe is parsed with `ast`; every import of a
module of the package — at module level or inside a function or method —
is an edge of the import graph, which must be acyclic: a lower module
(pe.framework) never reaches back to a higher one (pe.tensor), not even
through an import deferred into a function. A positive control checks that
the analysis finds a cycle hidden in a function-level import.
"""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG_DIR = os.path.join(ROOT, "bindings", "python", "pe")


def _modules(pkg_dir, pkg_name):
    """{module name: file} for every .py file of the package, and its C
    extension modules (a .c file defining PyInit_<name>: leaves)."""
    mods = {}
    for d, _, files in os.walk(pkg_dir):
        for f in files:
            if f.endswith(".c"):
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    for ext in re.findall(r"PyInit_(\w+)\s*\(", fh.read()):
                        rel = os.path.relpath(d, pkg_dir).split(os.sep)
                        mods[".".join([pkg_name] + [r for r in rel if r != "."] + [ext])] = os.path.join(d, f)
                continue
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(d, f), pkg_dir)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            mods[".".join([pkg_name] + rel)] = os.path.join(d, f)
    return mods


def _edges(mods, pkg_name):
    """{module: {(imported module, line)}} over every import statement, nested ones included."""
    edges = {m: set() for m in mods}
    for mod, path in mods.items():
        if not path.endswith(".py"):
            continue
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
        is_pkg = os.path.basename(path) == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == pkg_name or a.name.startswith(pkg_name + "."):
                        edges[mod].add((_nearest(a.name, mods), node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - (node.level - 1)])
                    target = base + ("." + node.module if node.module else "")
                elif node.module and (node.module == pkg_name or node.module.startswith(pkg_name + ".")):
                    target = node.module
                else:
                    continue
                for a in node.names:
                    sub = target + "." + a.name
                    t = sub if sub in mods else _nearest(target, mods)
                    if t != mod:  # a package's __init__ importing its own names
                        edges[mod].add((t, node.lineno))
    return edges


def _nearest(name, mods):
    while name and name not in mods and "." in name:
        name = name.rpartition(".")[0]
    return name


def _find_cycle(edges):
    """A list of (module, line) forming a cycle, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        for t, line in sorted(edges.get(m, ())):
            stack.append((m, line, t))
            if state.get(t) == 1:
                i = next(k for k, (src, _, _) in enumerate(stack) if src == t)
                return stack[i:]
            if t in edges and not state.get(t):
                c = visit(t)
                if c:
                    return c
            stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if not state.get(m):
            c = visit(m)
            if c:
                return c
    return None


def _describe(cycle, mods):
    return " -> ".join("%s (%s:%d)" % (t, os.path.relpath(mods.get(src, src), ROOT), line)
                       for src, line, t in cycle)


def test_package_import_graph_is_acyclic():
    mods = _modules(PKG_DIR, "pe")
    assert "pe.framework" in mods and "pe.tensor" in mods, "the package moved: %s" % PKG_DIR
    edges = _edges(mods, "pe")
    # The analysis sees the package's real imports, the C extension included.
    assert any(t == "pe.framework" for t, _ in edges["pe.tensor"])
    assert any(t == "pe._core" for t, _ in edges["pe.framework"])
    cycle = _find_cycle(edges)
    assert cycle is None, "import cycle in the pe package: %s" % _describe(cycle, mods)


def test_cycle_through_a_function_level_import_is_found(tmp_path):
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import low\n")
    (pkg / "low.py").write_text("class Var:\n    def add(self, o):\n        from . import high\n"
                                "        return high.add(self, o)\n")
    (pkg / "high.py").write_text("from .low import Var\n\ndef add(a, b):\n    return a\n")
    mods = _modules(str(pkg), "toy")
    cycle = _find_cycle(_edges(mods, "toy"))
    assert cycle is not None
    assert {src for src, _, _ in cycle} == {"toy.low", "toy.high"}


@pytest.mark.parametrize("name", ["framework", "initializer", "layer_helper", "param_attr", "regularizer"])
def test_lower_modules_do_not_import_tensor(name):
    mods = _modules(PKG_DIR, "pe")
    edges = _edges(mods, "pe")
    assert all(t != "pe.tensor" for t, _ in edges["pe." + name]), "pe.%s imports pe.tensor" % name
