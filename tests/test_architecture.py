"""The package's layout (docs/architecture.md): stage folders, imports pointing down the pipeline only,
no import cycles, and the flat import paths plug-ins were written against.

The graph holds every ``import`` and ``from ... import`` of every module of hcclsim, including imports
inside functions (an import deferred for start-up time is still a dependency). The layer order is read
from the table in docs/architecture.md, so the page and the rule cannot disagree. What this guards,
for example:

* ``from ..engine.analytic import Timing`` added to ``hcclsim/network/topology.py`` is refused: layer 2
  (network) would import layer 5 (engine), against the order;
* ``from .checker import check`` added to ``hcclsim/schedule/ir.py`` is refused although both sit in
  layer 3: ``schedule.checker`` imports ``schedule.ir``, so the two would form the cycle
  ``hcclsim.schedule.checker -> hcclsim.schedule.ir -> hcclsim.schedule.checker``
  (test_an_import_that_closes_a_cycle_is_caught adds exactly that edge and requires the report).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# repository folder -> installed package name (pyproject.toml's package-dir)
FOLDERS = {"hcclsim": "hcclsim", "algorithms": "hcclsim.algorithms", "topologies": "hcclsim.topologies",
           "scenarios": "hcclsim.scenarios"}


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the installed package: name -> (file, is a package)."""
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts.pop()
            out[".".join([package, *parts])] = (path, is_pkg)
    return out


def imports_of(name: str, path: Path, is_pkg: bool, known: set[str]) -> set[str]:
    """The hcclsim modules `name` imports; `from X import y` counts as X.y when X.y is a module."""
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, is_pkg, set(mods)) for name, (path, is_pkg) in mods.items()}


def layer_table(text: str) -> list[str]:
    """The package prefixes of docs/architecture.md's layer table, bottom layer first."""
    block = re.search(r"<!-- layers:.*?-->(.*?)<!-- /layers -->", text, re.DOTALL)
    assert block, "docs/architecture.md has no <!-- layers --> table"
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*`([^`]+)`\s*\|", block.group(1), re.MULTILINE)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), "layers must be numbered 1, 2, ..."
    return [folder.replace("/", ".") for _, folder in rows]


def layer_of(module: str, layers: list[str]) -> int | None:
    """The layer whose prefix is the longest that names module (hcclsim itself is the root, last)."""
    best = None
    for i, prefix in enumerate(layers):
        names = module == prefix or module.startswith(prefix + ".")
        if names and (best is None or len(prefix) > len(layers[best])):
            best = i
    return best


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each as a sorted list."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def violations(graph: dict[str, set[str]], layers: list[str]) -> list[str]:
    """Imports from a lower layer to a higher one, and modules in no layer."""
    out = []
    data = {"hcclsim.topologies", "hcclsim.scenarios"}          # TOML folders: no code to place
    for mod in sorted(graph):
        if any(mod == d or mod.startswith(d + ".") for d in data):
            continue
        here = layer_of(mod, layers)
        if here is None:
            out.append(f"{mod}: in no layer of docs/architecture.md")
            continue
        for dep in sorted(graph[mod]):
            there = layer_of(dep, layers)
            if there is not None and there > here:
                out.append(f"{mod} (layer {here + 1}, {layers[here]}) imports {dep} "
                           f"(layer {there + 1}, {layers[there]})")
    return out


@pytest.fixture(scope="module")
def graph():
    return import_graph()


@pytest.fixture(scope="module")
def layers():
    return layer_table((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))


def test_the_package_has_no_import_cycle(graph):
    assert cycles(graph) == []


def test_imports_point_down_the_layers(graph, layers):
    assert violations(graph, layers) == []


def test_every_stage_folder_is_a_layer(layers):
    """Each folder under hcclsim/ (and api.py) is named by the table, and each row names a real folder:
    a new top-level module would otherwise sit in the root layer, free to import anything."""
    folders = {f"hcclsim.{p.name}" for p in (ROOT / "hcclsim").iterdir() if (p / "__init__.py").is_file()}
    folders |= {f"hcclsim.{p.stem}" for p in (ROOT / "hcclsim").glob("*.py") if p.stem != "__init__"}
    assert folders | {"hcclsim.algorithms", "hcclsim"} == set(layers)


def test_an_import_that_closes_a_cycle_is_caught(graph):
    """The module docstring's example: schedule.ir importing schedule.checker closes a cycle."""
    assert "hcclsim.schedule.ir" in graph["hcclsim.schedule.checker"]
    broken = {k: set(v) for k, v in graph.items()}
    broken["hcclsim.schedule.ir"].add("hcclsim.schedule.checker")
    found = cycles(broken)
    assert len(found) == 1 and {"hcclsim.schedule.checker", "hcclsim.schedule.ir"} <= set(found[0])


def test_an_import_up_the_pipeline_is_caught(graph, layers):
    """The docstring's other example: network.topology importing engine.analytic."""
    broken = {k: set(v) for k, v in graph.items()}
    broken["hcclsim.network.topology"].add("hcclsim.engine.analytic")
    want = ("hcclsim.network.topology (layer 2, hcclsim.network) imports hcclsim.engine.analytic "
            "(layer 5, hcclsim.engine)")
    assert violations(broken, layers) == [want]


def test_relative_and_function_level_imports_are_in_the_graph(graph):
    """`from .. import x` resolves, and an import inside a function counts (api imports tune lazily)."""
    assert "hcclsim.analysis.tune" in graph["hcclsim.api"]
    assert "hcclsim.schedule.collectives" in graph["hcclsim.algorithms.ring"]
    assert "hcclsim.engine.packet_kernel" in graph["hcclsim.engine.packet"]


def test_old_flat_import_paths_are_the_moved_modules():
    """Plug-ins written against the flat layout import the same module objects."""
    import importlib

    from hcclsim.core.aliases import OLD_PATHS
    for old, new in OLD_PATHS.items():
        assert importlib.import_module(old) is importlib.import_module(new)
    from hcclsim.algorithm import register

    from hcclsim.schedule import ScheduleBuilder
    from hcclsim.schedule.algorithm import register as reg
    from hcclsim.schedule.ir import ScheduleBuilder as SB
    assert register is reg and ScheduleBuilder is SB
