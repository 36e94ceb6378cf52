"""Code written against trio-ccm's public API, the way a provider author or an embedder
writes it, type-checks under `mypy --strict`: the docs' walkthrough and embedding example,
and providers in the usual shapes (tests/fixtures/typing/). One mypy run, its cache kept in
pytest's cache directory (cold about 4 s, warm under 1 s)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.docs import blocks, walkthrough_files

FIXTURES = Path(__file__).parents[1] / "fixtures" / "typing"
_ERROR = re.compile(r"^(?P<file>[\w.]+\.py):(?P<line>\d+): error: (?P<message>.*)$", re.M)


def expected_errors(directory: Path) -> set[tuple[str, int]]:
    """The (file, line) pairs marked `# mypy: error` in the files of `directory`."""
    return {
        (path.name, number)
        for path in directory.glob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if line.rstrip().endswith("# mypy: error")
    }


def test_third_party_code_type_checks_against_the_public_api(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """mypy --strict (no project config) finds no error in the docs' code or in providers
    written the natural way, and finds exactly the marked errors in broken ones."""
    for path in FIXTURES.glob("*.py"):
        shutil.copy(path, tmp_path / path.name)
    for name, code in walkthrough_files("providers.md").items():
        if name.endswith(".py"):
            (tmp_path / name).write_text(code)
    (tmp_path / "embedding_example.py").write_text(blocks("embedding.md")[-1])
    cache = getattr(request.config, "cache", None)
    cache_dir = cache.mkdir("mypy-public-api") if cache is not None else tmp_path / ".cache"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file=",
            f"--cache-dir={cache_dir}",
            "--no-color-output",
            *sorted(p.name for p in tmp_path.glob("*.py")),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = {(m["file"], int(m["line"])) for m in _ERROR.finditer(done.stdout)}
    assert found == expected_errors(tmp_path), done.stdout + done.stderr
    assert done.returncode == 1, done.stdout + done.stderr  # 1: type errors, nothing worse
