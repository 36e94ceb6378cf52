"""The provider walkthrough in docs/providers.md works as written: its files, written to an
empty directory, make a passing pytest-trio suite, on public names only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.docs import private_imports, walkthrough_files

DOC = "providers.md"


def test_the_walkthrough_imports_public_names_only() -> None:
    """Every trio_ccm name the walkthrough's Python files import is public."""
    files = walkthrough_files(DOC)
    assert sorted(files) == ["conftest.py", "mycloud_ccm.py", "pyproject.toml", "test_mycloud.py"]
    assert {
        name: private_imports(code) for name, code in files.items() if name.endswith(".py")
    } == {
        "conftest.py": [],
        "mycloud_ccm.py": [],
        "test_mycloud.py": [],
    }


def test_the_walkthrough_passes_from_an_empty_directory(tmp_path: Path) -> None:
    """pytest, run in a directory holding only the walkthrough's files, passes its test."""
    for name, code in walkthrough_files(DOC).items():
        (tmp_path / name).write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1].startswith("1 passed")
