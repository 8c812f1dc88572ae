"""``clef_agents`` has no import cycle, counting every import: top level, inside functions, under ``TYPE_CHECKING``.

An import placed inside a function hides a cycle from Python, not from a reader: the two modules still
need each other. So the graph here is built from the source with ``ast``, not from ``sys.modules``:

- every ``import``/``from ... import`` of a ``clef_agents`` module anywhere in a module is an edge,
  relative imports resolved; ``from pkg import name`` points at ``pkg.name`` when that is a module,
  else at ``pkg`` (a package counts as its ``__init__``);
- importing ``a.b.c`` from outside ``a.b`` also runs ``a/b/__init__``, so it is an edge to that
  ``__init__`` too (a module's own enclosing packages are already running, so they are not);
- left out: the imports of a package ``__init__`` from its own submodules under ``if TYPE_CHECKING:``.
  Those mirror the package's lazy ``__getattr__`` table (``clef_agents.lazy``), which loads a submodule
  on first use of one of its names and so keeps ``import clef_agents`` free of torch, transformers and
  langgraph; neither runs when the package is imported.

``test_no_folder_cycle`` applies the same rule one level up: the subpackages of ``clef_agents``
(``train/``, ``thresholds/``, ``graph/``...) do not import each other in a circle; the modules directly
in ``clef_agents`` are the shared layer (``wire``, ``records``) or entry points (``loading``), not folders.
``test_every_import_of_clef_agents_names_a_module`` catches an import left behind when a module moves.

The checker is tested on small packages written to ``tmp_path``: it finds the cycles planted there and
passes the same packages without them, so a failure of the real check means a real cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import clef_agents

PACKAGE_DIR = Path(clef_agents.__file__).resolve().parent

Graph = dict[str, dict[str, str]]
"""Module → {module it imports: where (``file:line`` of the first such import)}."""


# --------------------------------------------------------------------------- the checker


def module_files(package_dir: Path) -> dict[str, Path]:
    """Dotted module name → source file, for every ``.py`` file of the package (``pkg/__init__.py`` is ``pkg``)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """``id`` of every node inside an ``if TYPE_CHECKING:`` block."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING"):
            guarded |= {id(inner) for child in node.body for inner in ast.walk(child)}
    return guarded


def _imported_names(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool
) -> Iterator[tuple[str, str | None]]:
    """(module imported, name taken from it or None) for one import statement, relative ones resolved."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
        return
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    for alias in node.names:
        yield base, alias.name


def imports_of(module: str, modules: Mapping[str, Path], package_dir: Path) -> Iterator[tuple[str, str]]:
    """(module of the package imported, where: ``file:line``) for every import in ``module``, the lazy table's
    ``TYPE_CHECKING`` mirror left out (module docstring). A name that is no module of the package is yielded as is."""
    path, root = modules[module], package_dir.name
    source = path.relative_to(package_dir.parent).as_posix()
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    guarded = _type_checking_nodes(tree) if is_package else set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for base, name in _imported_names(node, module, is_package):
            if base != root and not base.startswith(root + "."):
                continue
            target = f"{base}.{name}" if name and f"{base}.{name}" in modules else base
            if not (id(node) in guarded and target.startswith(module + ".")):
                yield target, f"{source}:{node.lineno}"


def module_imports(module: str, modules: Mapping[str, Path], package_dir: Path) -> dict[str, str]:
    """The edges out of ``module``: each module of the package it imports, with where (the first such import)."""
    edges: dict[str, str] = {}
    for target, where in imports_of(module, modules, package_dir):
        if target in modules:
            for edge in (target, *sorted(_packages_run_by(target, module))):
                edges.setdefault(edge, where)
    edges.pop(module, None)
    return edges


def missing_imports(package_dir: Path) -> list[str]:
    """Every import of a module of the package that does not exist, as ``file:line imports name``."""
    modules = module_files(package_dir)
    return [
        f"{where} imports {target}"
        for module in modules
        for target, where in imports_of(module, modules, package_dir)
        if target not in modules
    ]


def _packages_run_by(target: str, importer: str) -> set[str]:
    """The enclosing packages of ``target`` whose ``__init__`` runs when ``importer`` imports it."""
    parts = target.split(".")
    enclosing = {".".join(parts[:i]) for i in range(1, len(parts))}
    return {p for p in enclosing if not (importer == p or importer.startswith(p + "."))}


def import_graph(package_dir: Path) -> Graph:
    """Module → the modules of the same package it imports, for the package at ``package_dir``."""
    modules = module_files(package_dir)
    return {module: module_imports(module, modules, package_dir) for module in modules}


def find_cycle(graph: Mapping[str, Mapping[str, str]]) -> list[str] | None:
    """One cycle of the graph as ``[a, b, ..., a]``, or None when it has none (iterative depth-first search).

    Example:
        >>> find_cycle({"a": {"b": "a.py:1"}, "b": {"a": "b.py:3"}})
        ['a', 'b', 'a']
    """
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        stack = [iter(sorted(graph.get(start, ())))]
        state[start] = "open"
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = "done"
                stack.pop()
            elif state.get(step) == "open":
                return [*path[path.index(step) :], step]
            elif step not in state:
                state[step] = "open"
                path.append(step)
                stack.append(iter(sorted(graph.get(step, ()))))
    return None


def reachable(graph: Mapping[str, Mapping[str, str]], start: str) -> set[str]:
    """Every node a path from ``start`` reaches (``start`` itself only through a cycle)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for step in graph.get(todo.pop(), ()):
            if step not in seen:
                seen.add(step)
                todo.append(step)
    return seen


def all_cycles(graph: Mapping[str, Mapping[str, str]]) -> list[list[str]]:
    """One cycle for each group of nodes that reach each other (a strongly connected group), so a
    failure lists every circle to break at once.

    Example:
        >>> all_cycles({"a": {"b": ""}, "b": {"a": ""}, "c": {"d": ""}, "d": {"c": ""}, "e": {"a": ""}})
        [['a', 'b', 'a'], ['c', 'd', 'c']]
    """
    reach = {node: reachable(graph, node) for node in graph}
    cycles, placed = [], set()
    for node in sorted(graph):
        if node in placed or node not in reach[node]:
            continue
        group = {other for other in reach[node] if node in reach.get(other, ())}
        placed |= group
        cycles.append(find_cycle({m: {t: w for t, w in graph[m].items() if t in group} for m in group}))
    return cycles


def folder_graph(graph: Mapping[str, Mapping[str, str]], root: str) -> Graph:
    """The graph between the subpackages of ``root``, each standing for everything below it.

    Modules directly in ``root`` are left out: they are the layer every subpackage shares (``wire``,
    ``records``, ``policy``) or entry points that reach into several (``loading``, ``cli``).
    """
    packages = {".".join(m.split(".")[:2]) for m in graph if m.count(".") >= 2}

    def folder(module: str) -> str | None:
        head = ".".join(module.split(".")[:2])
        return head if head in packages else None

    folded: Graph = {package: {} for package in sorted(packages)}
    for module, targets in sorted(graph.items()):
        source = folder(module)
        for target, where in sorted(targets.items()):
            if source is not None and folder(target) not in (None, source):
                folded[source].setdefault(folder(target), f"{where} imports {target}")
    return folded


def describe(cycle: list[str], graph: Mapping[str, Mapping[str, str]]) -> str:
    """A cycle, one edge a line with where it is made.

    Example:
        >>> print(describe(["a", "b", "a"], {"a": {"b": "a.py:1"}, "b": {"a": "b.py:3"}}))
        import cycle:
          a -> b  (a.py:1)
          b -> a  (b.py:3)
    """
    return "\n".join(["import cycle:", *(f"  {a} -> {b}  ({graph[a][b]})" for a, b in zip(cycle, cycle[1:]))])


# --------------------------------------------------------------------------- clef_agents


def test_no_module_imports_another_that_imports_it_back():
    graph = import_graph(PACKAGE_DIR)
    cycles = all_cycles(graph)
    assert not cycles, "\n".join(describe(cycle, graph) for cycle in cycles)


def test_every_import_of_clef_agents_names_a_module():
    assert missing_imports(PACKAGE_DIR) == []


def test_no_folder_cycle():
    graph = folder_graph(import_graph(PACKAGE_DIR), PACKAGE_DIR.name)
    cycles = all_cycles(graph)
    assert not cycles, "\n".join(describe(cycle, graph) for cycle in cycles)


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph(PACKAGE_DIR)
    assert "clef_agents.serve.ray_app" in graph["clef_agents.serve.cli"]  # `--ray` imports ray only when asked
    assert "clef_agents.model" not in graph["clef_agents"]  # the lazy table's TYPE_CHECKING mirror is left out


# --------------------------------------------------------------------------- the checker, on packages written here


def _write_package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_the_checker_finds_a_cycle_hidden_inside_a_function(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import g\n\ndef f():\n    return g()\n",
            "pkg/b.py": "def g():\n    from pkg import a  # noqa\n    return a\n",
        },
    )
    assert find_cycle(import_graph(package)) == ["pkg.a", "pkg.b", "pkg.a"]
    assert all_cycles(import_graph(package)) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_the_checker_finds_a_cycle_through_relative_imports_and_a_package_init(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from .c import C\n",
            "pkg/sub/c.py": "C = 1\n",
            "pkg/d.py": "def f():\n    from .sub.c import C\n    return C\n",
            "pkg/e.py": "import pkg.d\n",
            "pkg/sub/more.py": "from ..e import pkg\n",
        },
    )
    graph = import_graph(package)
    assert graph["pkg.d"] == {"pkg.sub": "pkg/d.py:2", "pkg.sub.c": "pkg/d.py:2"}  # pkg/sub/__init__ runs on the way
    assert find_cycle(graph) is None
    (package / "sub" / "c.py").write_text("C = 1\n\ndef f():\n    from pkg.e import pkg\n", encoding="utf-8")
    assert find_cycle(import_graph(package)) == ["pkg.d", "pkg.sub", "pkg.sub.c", "pkg.e", "pkg.d"]


def test_the_checker_passes_a_package_without_a_cycle(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.a import f\n"
                "_LAZY = {'f': 'pkg.a'}\n"
            ),
            "pkg/a.py": "import os\nfrom pkg import b\n\ndef f():\n    from pkg.b import g\n    return g()\n",
            "pkg/b.py": "import pkg\n\ndef g():\n    return pkg.__name__\n",
        },
    )
    graph = import_graph(package)
    assert graph == {"pkg": {}, "pkg.a": {"pkg.b": "pkg/a.py:2"}, "pkg.b": {"pkg": "pkg/b.py:1"}}
    assert find_cycle(graph) is None


def test_the_checker_names_an_import_of_a_missing_module(tmp_path):
    package = _write_package(
        tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import pkg\n\ndef f():\n    from pkg.gone import x\n"}
    )
    assert missing_imports(package) == ["pkg/a.py:4 imports pkg.gone"]
    assert import_graph(package)["pkg.a"] == {"pkg": "pkg/a.py:1"}


def test_the_folder_check_finds_two_subpackages_that_import_each_other(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/top.py": "import pkg.x.a\n",
            "pkg/x/__init__.py": "",
            "pkg/x/a.py": "from pkg import top\n",
            "pkg/y/__init__.py": "",
            "pkg/y/deep/__init__.py": "",
            "pkg/y/deep/b.py": "from pkg.x import a\n",
        },
    )
    graph = folder_graph(import_graph(package), "pkg")
    assert graph == {"pkg.x": {}, "pkg.y": {"pkg.x": "pkg/y/deep/b.py:1 imports pkg.x"}}  # top.py is no folder
    assert find_cycle(graph) is None
    (package / "x" / "a.py").write_text("def f():\n    from pkg.y.deep import b\n", encoding="utf-8")
    assert find_cycle(folder_graph(import_graph(package), "pkg")) == ["pkg.x", "pkg.y", "pkg.x"]
