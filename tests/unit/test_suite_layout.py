"""The suite's own shape: shared builders live in `tests/helpers/` or `trio_ccm.testing`, so
no test module imports another test module or a conftest, and conftest files hold only
fixtures and pytest hooks."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of the suite, by dotted name."""
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(TESTS.parent)
        yield ".".join(relative.with_suffix("").parts), path


_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w., \t]+)", re.M)


def imported(name: str, text: str) -> Iterator[str]:
    """The dotted names module `name` imports, relative imports resolved. (Read off the
    import statements' lines: parsing the whole suite would cost half a second.)"""
    package = name.rsplit(".", 1)[0]
    for match in _FROM.finditer(text):
        dots, base, names = match.groups()
        if dots:
            anchor = package.rsplit(".", len(dots) - 1)[0] if len(dots) > 1 else package
            base = f"{anchor}.{base}" if base else anchor
        yield base
        for alias in names.strip("()").replace("\n", " ").split(","):
            if alias.split("#")[0].strip():
                yield f"{base}.{alias.split()[0]}"
    for match in _IMPORT.finditer(text):
        yield from (alias.split()[0] for alias in match.group(1).split(",") if alias.strip())


def is_test_module(dotted: str) -> bool:
    last = dotted.rsplit(".", 1)[-1]
    return dotted.startswith("tests.") and (last.startswith("test_") or last == "conftest")


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    """Test modules and conftest files are imported by pytest alone; what tests share is
    imported from tests/helpers/ or trio_ccm.testing."""
    found = [
        f"{name} imports {target}"
        for name, path in modules()
        for target in imported(name, path.read_text())
        if is_test_module(target)
    ]
    assert found == []


def _is_fixture_or_hook(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return isinstance(node.value.value, str)  # the docstring
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        if node.name.startswith("pytest_"):
            return True
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if ast.unparse(target) in ("pytest.fixture", "fixture"):
                return True
    return False


def test_conftest_files_hold_only_fixtures_and_hooks() -> None:
    """A builder in a conftest tempts other modules to import it: it belongs in
    tests/helpers/ (or, for provider authors, trio_ccm.testing)."""
    found = [
        f"{name}: line {node.lineno} is neither a fixture nor a pytest hook"
        for name, path in modules()
        if name.endswith(".conftest")
        for node in ast.parse(path.read_text(), str(path)).body
        if not _is_fixture_or_hook(node)
    ]
    assert found == []


def test_every_test_has_a_docstring() -> None:
    """Each test function says in a sentence what behaviour it holds (STYLE: one-sentence
    docstring per test)."""
    missing = [
        f"{name}: line {node.lineno} {node.name}"
        for name, path in modules()
        if is_test_module(name)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test")
        and not ast.get_docstring(node)
    ]
    assert missing == []
