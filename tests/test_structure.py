"""The shape of the core package: no import cycle between its packages, no module over 500 lines.

The import graph is read from the source (AST), not by importing: every `import`/`from ... import` anywhere in a module
counts, at module level, inside functions and under `if TYPE_CHECKING:` alike, so a lazy import cannot hide a cycle.
A node is a package directly under vxsynth/ (`vxsynth.store`) or a top-level module (`vxsynth.errors`); imports within
one package are not edges. Run as a script (`python tests/test_structure.py`) it prints the graph and any cycle.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "vxsynth"
MAX_LINES = 500
# Modules allowed over MAX_LINES, each with the work that removes it from this list.
OVER_MAX: set[str] = set()


def _node(f: Path) -> str:
    """The package directly under vxsynth/ that file `f` belongs to, or its own name for a top-level module."""
    parts = f.relative_to(CORE).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def _imported(f: Path) -> list[tuple[str, int]]:
    """(absolute module name, line) of every import in `f`; `from X import name` also yields `X.name` (it may be a
    module)."""
    rel = f.relative_to(ROOT).with_suffix("").parts
    package = list(rel[:-1])
    out = []
    for n in ast.walk(ast.parse(f.read_text(), str(f))):
        if isinstance(n, ast.Import):
            out += [(a.name, n.lineno) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = ".".join(package[:len(package) - n.level + 1] + [n.module or ""]).strip(".") if n.level else n.module
            out += [(base, n.lineno)] * bool(n.module) + [(f"{base}.{a.name}", n.lineno) for a in n.names]
    return out


def import_graph() -> dict[str, dict[str, list[str]]]:
    """{package: {imported package: ["file:line", ...]}} between the nodes of vxsynth."""
    graph: dict[str, dict[str, list[str]]] = {}
    for f in sorted(CORE.rglob("*.py")):
        src = _node(f)
        graph.setdefault(src, {})
        for name, line in _imported(f):
            parts = name.split(".")
            if parts[0] == "vxsynth" and len(parts) > 1 and parts[1] != src and (
                    (CORE / parts[1]).is_dir() or (CORE / f"{parts[1]}.py").exists()):
                sites = graph[src].setdefault(parts[1], [])
                if f"{f.relative_to(ROOT)}:{line}" not in sites:
                    sites.append(f"{f.relative_to(ROOT)}:{line}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan), each sorted: every one holds a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def describe(comp: list[str], graph: dict[str, dict[str, list[str]]]) -> str:
    """One cycle's packages and the imports that tie them, each edge with its first import site."""
    edges = [f"{a} -> {b} ({sites[0]}{f' +{len(sites) - 1}' if len(sites) > 1 else ''})"
             for a in comp for b, sites in sorted(graph[a].items()) if b in comp]
    return f"import cycle between {', '.join(comp)}:\n    " + "\n    ".join(edges)


def long_modules() -> dict[str, int]:
    """{module: lines} of every Python file in the repository's code over MAX_LINES."""
    out = {}
    for top in ("vxsynth", "flows", "tasks", "bench", "tests"):
        for f in sorted((ROOT / top).rglob("*.py")):
            n = len(f.read_text().splitlines())
            if n > MAX_LINES:
                out[str(f.relative_to(ROOT))] = n
    return out


def test_no_import_cycle_between_core_packages():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "\n".join(describe(c, graph) for c in found)


def test_no_module_over_500_lines():
    over = {f: n for f, n in long_modules().items() if f not in OVER_MAX}
    assert not over, (f"over {MAX_LINES} lines: " + ", ".join(f"{f} ({n})" for f, n in over.items())
                      + "; split each by concern into modules named for what they do")


def test_the_exceptions_are_still_needed():
    long = long_modules()
    assert not [f for f in OVER_MAX if f not in long], "a module in OVER_MAX is now short enough: take it off the list"


if __name__ == "__main__":
    g = import_graph()
    for pkg in sorted(g):
        print(f"{pkg} -> {', '.join(sorted(g[pkg])) or '(nothing)'}")
    found = cycles(g)
    for c in found:
        print(describe(c, g))
    print(f"{len(found)} import cycle(s) between core packages")
    for f, n in long_modules().items():
        print(f"{f}: {n} lines" + (" (allowed: OVER_MAX)" if f in OVER_MAX else ""))
    sys.exit(1 if found else 0)
