"""The test suite's own rules: test modules share code through ``helpers`` only, and the
Hypothesis profiles of the two tiers (``make test-fast``, ``make test``)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import CI_EXAMPLES, examples
from hypothesis import settings

TESTS = Path(__file__).parent


def imported_test_modules(source: str) -> set[str]:
    """The test modules (``test_*``) and ``conftest`` that ``source`` imports, anywhere in
    it (inside functions too), as ``import x`` or ``from x import y``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            last = name.rsplit(".", 1)[-1]
            if last.startswith("test_") or last == "conftest":
                found.add(name)
    return found


def test_no_test_module_imports_another_or_conftest():
    imported = {
        path.name: sorted(imported_test_modules(path.read_text()))
        for path in sorted(TESTS.glob("*.py"))
    }
    assert not {name: found for name, found in imported.items() if found}, (
        "shared test code belongs in tests/helpers.py"
    )


def test_the_import_check_sees_imports_of_test_modules():
    source = "import os\nfrom test_io import x\ndef f():\n    import conftest\n"
    assert imported_test_modules(source) == {"test_io", "conftest"}
    assert imported_test_modules("from helpers import x\nimport tests.test_mm") == {"tests.test_mm"}


def test_the_fast_profile_runs_a_tenth_of_each_property():
    assert settings.get_profile("ci").max_examples == CI_EXAMPLES  # each property's own count
    assert settings.get_profile("fast").max_examples == CI_EXAMPLES // 10
    assert examples(CI_EXAMPLES) == settings.default.max_examples  # the loaded profile's
    assert examples(1) == 1  # never none
    assert settings.get_profile("ci").derandomize  # Hypothesis's CI settings: reproducible
