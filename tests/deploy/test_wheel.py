"""The runtime wheel (what the image installs) holds the controller manager and the small
public test kit, and none of the test world; the kit says how to install the test world
when it is missing; the test world's commands come through an entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from trio_ccm.cli import COMMANDS_GROUP, commands

ROOT = Path(__file__).resolve().parents[2]

KIT = {"__init__.py", "_world.py", "factories.py", "harness.py", "plugin.py", "referee.py"}


def test_runtime_wheel_holds_no_test_world(tmp_path: Path) -> None:
    """`pip wheel --no-deps` on what the Dockerfile copies (pyproject.toml, README.md, src/)
    builds a wheel of trio_ccm only: no trio_ccm_testbed, no emulator schema, and
    trio_ccm/testing is the kit's few modules."""
    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, context / name)
    shutil.copytree(
        ROOT / "src", context / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), "."],
        cwd=context,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("trio_ccm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"trio_ccm", wheel.name.split("-py3")[0] + ".dist-info"}
    assert not [name for name in names if name.endswith(".json")]
    kit = {name.split("/")[-1] for name in names if name.startswith("trio_ccm/testing/")}
    assert kit == KIT
    assert "trio_ccm/cli/__init__.py" in names
    assert "trio_ccm/base/mailbox.py" in names


def test_public_kit_without_the_test_world_says_how_to_install_it() -> None:
    """With trio_ccm_testbed absent, importing the harness fails with the pip command that
    installs it (not a bare ModuleNotFoundError)."""
    program = (
        "import sys\n"
        "sys.modules['trio_ccm_testbed'] = None  # as if it were not installed\n"
        "import trio_ccm.testing.factories  # needs only the runtime\n"
        "try:\n"
        "    import trio_ccm.testing.harness\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    assert "pip install 'trio-ccm[testing]'" in result.stdout


def test_test_world_commands_come_through_the_entry_point_group() -> None:
    """`apiserver`, `testbed` and `demo` are registered by trio-ccm-testbed in the
    `trio_ccm.commands` group, not wired into the runtime."""
    found = commands()
    assert set(found) == {"apiserver", "testbed", "demo"}
    assert COMMANDS_GROUP == "trio_ccm.commands"
    assert {entry.dist.name for entry in found.values() if entry.dist} == {"trio-ccm-testbed"}
    assert all(entry.module == "trio_ccm_testbed.cli" for entry in found.values())
