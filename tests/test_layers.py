"""The package's modules import one way: models -> data -> results -> inference -> api -> cli.

Walks every module's imports with ``ast`` (those inside functions too) and fails on an
import of a higher layer, or on a cycle among the imports run when a module loads.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "bernmf"

LAYERS = [
    {"bernmf.models"},  # the model: priors, likelihood, simulation
    {"bernmf.data", "bernmf.split", "bernmf.datasets", "bernmf.readers"}
    | {"bernmf._output", "bernmf._labels", "bernmf._archive", "bernmf._progress"}
    | {"bernmf._cache"},  # writers, label codec, zip reader, progress lines, cache folders
    {"bernmf.results", "bernmf.io", "bernmf.posterior", "bernmf.plot"}
    | {"bernmf.convergence", "bernmf.modes", "bernmf.stacking"},  # what a fit is, its summaries
    {"bernmf.inference"},  # the engines
    {"bernmf.api", "bernmf.tune", "bernmf.comparison", "bernmf.ensemble"}
    | {"bernmf.report", "bernmf.experiments", "bernmf.distributed"},  # running engines
    {"bernmf.cli", "bernmf.commands", "bernmf.launch"}
    | {"bernmf.estimator", "bernmf.__main__"},  # front ends
    {"bernmf"},  # the package's namespace re-exports everything
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(name: str) -> int:
    """The layer of a module: that of the longest layer entry it is, or is inside of."""
    matches = [
        (len(entry), i)
        for i, entries in enumerate(LAYERS)
        for entry in entries
        if name == entry or name.startswith(entry + ".")
    ]
    if not matches:
        raise AssertionError(f"{name} is in no layer: add it to LAYERS")
    return max(matches)[1]


def imports(name: str, *, top_level_only: bool = False) -> set[str]:
    """The package modules that module ``name`` imports."""
    tree = ast.parse(MODULES[name].read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` imports the module; `from module import name`,
            # the module
            inner = {f"{node.module}.{alias.name}" for alias in node.names}
            found |= (inner & MODULES.keys()) or {node.module}
    return {m for m in found if m in MODULES and m != name}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_a_higher_layer(name):
    upward = sorted(m for m in imports(name) if layer(m) > layer(name))
    assert not upward, f"{name} (layer {layer(name)}) imports {upward} from higher layers"


def test_no_cycle_among_the_imports_run_at_load_time():
    graph = {name: imports(name, top_level_only=True) for name in MODULES}
    done, path = set(), []

    def visit(name):
        if name in path:
            raise AssertionError(f"import cycle: {' -> '.join([*path[path.index(name) :], name])}")
        if name in done:
            return
        path.append(name)
        for other in sorted(graph[name]):
            visit(other)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def test_the_checker_sees_an_upward_import():
    # the test above cannot pass by reading nothing
    assert "bernmf.inference.mm" in imports("bernmf.tune")
    assert layer("bernmf.inference.mm") > layer("bernmf.data")
    assert layer("bernmf.cli") > layer("bernmf.api") > layer("bernmf.inference.registry")
