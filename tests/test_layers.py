"""The package's folders import one way: models -> data -> posterior -> results -> inference
-> fitting -> studies -> cli (docs/layout.md).

Walks every module's imports with ``ast`` (those inside functions too, not those under
``if TYPE_CHECKING:``, which never run) and fails on an import of a higher layer, or on
any cycle, the imports inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "bernmf"

LAYERS = [
    {
        "bernmf.models",
        "bernmf._moved",
        "bernmf._cache",
        "bernmf._environment",
        "bernmf._progress",
        "bernmf._output",
        "bernmf._interrupt",
        "bernmf._warnings",
    },
    {"bernmf.data"},  # a user's data checked, splits, datasets, the memory limit, files
    {"bernmf.posterior"},  # draws: summaries, alignment, diagnostics, PSIS, ArviZ export
    {"bernmf.results", "bernmf.plot"},  # what a fit is, saving and loading it, its plots
    {"bernmf.inference", "bernmf.engine_api"},  # the engines, and what one's own needs
    # the request, its runner, ensembles; the engine contract's checks
    {"bernmf.fitting", "bernmf.api", "bernmf.tune", "bernmf.testing"},
    {"bernmf.studies"},  # compare, the report, the paper's protocol
    {"bernmf.cli", "bernmf.estimator", "bernmf.__main__"},  # front ends
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


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:`` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skipped |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return skipped


def imports(name: str, *, top_level_only: bool = False, typing: bool = False) -> set[str]:
    """The package modules that module ``name`` imports (at load time only, or anywhere;
    with ``typing``, those only type checkers read too)."""
    tree = ast.parse(MODULES[name].read_text())
    skipped = set() if typing else _type_checking_only(tree)
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in (n for n in nodes if id(n) not in skipped):
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
    upward = sorted(m for m in imports(name, typing=True) if layer(m) > layer(name))
    assert not upward, f"{name} (layer {layer(name)}) imports {upward} from higher layers"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (its modules in order, the first repeated last), or None."""
    done, path = set(), []

    def visit(name):
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        path.append(name)
        for other in sorted(graph[name]):
            cycle = visit(other)
            if cycle:
                return cycle
        path.pop()
        done.add(name)
        return None

    for name in sorted(graph):
        cycle = visit(name)
        if cycle:
            return cycle
    return None


def test_no_cycle_among_all_imports_those_in_functions_and_for_types_included():
    graph = {name: imports(name, typing=True) for name in MODULES}
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_the_cycle_finder_finds_a_function_level_cycle():
    # the test above cannot pass by finding nothing
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert "bernmf.posterior.arviz" in imports("bernmf.results.fit")  # inside Fit.to_arviz
    assert "bernmf.posterior.arviz" not in imports("bernmf.results.fit", top_level_only=True)
    assert "bernmf.results.fit" not in imports("bernmf.results.diagnostics")  # types only
    assert "bernmf.results.fit" in imports("bernmf.results.diagnostics", typing=True)


def test_no_cycle_among_the_imports_run_at_load_time():
    graph = {name: imports(name, top_level_only=True) for name in MODULES}
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle at load time: {' -> '.join(cycle)}"


MAX_FLOORS = 11
"""The most floors the folders may stand on (issue 35: the 48 rooms of the flat package
stood on 15)."""


def room(name: str) -> str:
    """The room of a module in the drawing of the house: its folder directly under
    ``bernmf/`` (``bernmf.data.files.npz`` is in ``bernmf.data``), or itself."""
    return ".".join(name.split(".")[:2])


def floors(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Per node of an acyclic ``graph``, its longest chain of imports, itself first: the
    node stands on floor ``len(chain)``."""
    chains: dict[str, list[str]] = {}

    def chain(name):
        if name not in chains:
            below = [chain(other) for other in sorted(graph[name])]
            chains[name] = [name, *max(below, key=len, default=[])]
        return chains[name]

    for name in graph:
        chain(name)
    return chains


def test_the_folders_stand_on_few_floors_with_no_circle():
    rooms: dict[str, set[str]] = {}
    for name in MODULES:
        rooms.setdefault(room(name), set()).update(
            room(other) for other in imports(name, typing=True) if room(other) != room(name)
        )
    cycle = find_cycle(rooms)
    assert cycle is None, f"the folders import in a circle: {' -> '.join(cycle)}"
    top = max(floors(rooms).values(), key=len)
    assert len(top) <= MAX_FLOORS, f"{len(top)} floors: {' -> '.join(top)}"


def test_the_floors_are_counted_along_the_longest_chain():
    graph = {"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": set()}
    assert floors(graph) == {"a": ["a", "b", "c"], "b": ["b", "c"], "c": ["c"], "d": ["d"]}
    assert room("bernmf.data.files.npz") == "bernmf.data" and room("bernmf.api") == "bernmf.api"


def test_no_two_classes_share_a_name():
    # five classes were named Data and six State, each meaning something else
    defined = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(name)
    shared = {cls: modules for cls, modules in defined.items() if len(modules) > 1}
    assert not shared, f"classes of one name in several modules: {shared}"


def test_the_checker_sees_an_upward_import():
    # the test above cannot pass by reading nothing
    assert "bernmf.inference.mm" in imports("bernmf.inference.nuts")
    assert layer("bernmf.inference.mm") > layer("bernmf.data.observed")
    assert layer("bernmf.cli.parser") > layer("bernmf.api") > layer("bernmf.inference.registry")


def test_old_module_paths_import_the_moved_modules():
    import importlib

    from bernmf._moved import MOVED

    for old, new in MOVED.items():
        module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert module.__spec__.name == new  # its own spec, not the old path's


def test_no_module_of_the_package_imports_an_old_path():
    from bernmf._moved import MOVED

    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                named = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                named = {alias.name for alias in node.names}
            else:
                continue
            assert not named & MOVED.keys(), f"{name} imports {sorted(named & MOVED.keys())}"


def extras_keys(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The string keys of a fit's ``extras`` that a module's code reads, and those it
    writes (in an ``extras=`` dict, an ``extras = {...}``, ``extras[key] = ...`` or
    ``extras.update({...})``)."""

    def is_extras(node) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "extras") or (
            isinstance(node, ast.Name) and node.id == "extras"
        )

    def dict_keys(node) -> set[str]:
        if not isinstance(node, ast.Dict):
            return set()
        return {k.value for k in node.keys if isinstance(k, ast.Constant)}

    reads, writes = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_extras(node.value):
            if isinstance(node.slice, ast.Constant):
                (writes if isinstance(node.ctx, ast.Store) else reads).add(node.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if is_extras(node.func.value) and node.func.attr == "get" and node.args:
                if isinstance(node.args[0], ast.Constant):
                    reads.add(node.args[0].value)
            if is_extras(node.func.value) and node.func.attr == "update" and node.args:
                writes |= dict_keys(node.args[0])
        elif isinstance(node, ast.Compare) and any(is_extras(c) for c in node.comparators):
            if isinstance(node.left, ast.Constant):
                reads.add(node.left.value)
        elif isinstance(node, ast.keyword) and node.arg == "extras":
            writes |= dict_keys(node.value)
        elif isinstance(node, ast.Assign) and any(is_extras(t) for t in node.targets):
            writes |= dict_keys(node.value)
    return reads, writes


def test_no_module_reads_the_extras_another_writes():
    # extras are an engine's own: what other modules read is a typed field of Fit
    foreign = {}
    for name, path in MODULES.items():
        reads, writes = extras_keys(ast.parse(path.read_text()))
        if reads - writes:
            foreign[name] = sorted(reads - writes)
    assert not foreign, f"extras read where they are not written: {foreign}"


def test_the_extras_checker_sees_reads_and_writes():
    # the test above cannot pass by reading nothing
    source = """
fit.extras["a"]; fit.extras.get("b"); "c" in fit.extras
Fit(extras={"d": 1}); extras = {"e": 2}; extras["f"] = 3; extras.update({"g": 4})
"""
    reads, writes = extras_keys(ast.parse(source))
    assert reads == {"a", "b", "c"} and writes == {"d", "e", "f", "g"}
