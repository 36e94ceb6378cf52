"""What lets the suite run on several xdist workers (`make test`: `-n auto --dist loadgroup`):
the units of work a worker takes whole, and the description of the session's OpenStack world
for the benchmarks that run on it.

A unit is a test module (its module-scoped fixtures are set up once), except the OpenStack
group: every test that uses the session's world (`openstack`, one world per test process)
runs on one worker. The units are chosen here from node IDs, by the controller's scheduler
(`SharingScheduling`): xdist's own `loadgroup` reads `xdist_group` marks through a node ID
attribute that pytest 9.2 no longer has. On each worker, `check_openstack_group` refuses a
test that uses the world outside the group's paths.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

from trio_ccm_testbed.openstack import OpenStackWorld

OPENSTACK_GROUP = "openstack"
OPENSTACK_TESTS = (
    "tests/openstack/",
    "tests/bench/test_quick.py::test_openstack_quick_run",
)
"""Node ID prefixes of the tests that use the session's OpenStack world."""

BENCH = Path(__file__).resolve().parents[2] / "bench"


def work_unit(nodeid: str) -> str:
    """The unit of work a worker runs whole: the OpenStack group, else the test's module."""
    if nodeid.startswith(OPENSTACK_TESTS):
        return OPENSTACK_GROUP
    return nodeid.split("::", 1)[0]


def check_openstack_group(items: list[pytest.Item]) -> None:
    """Refuse (before any test runs) a test that uses the OpenStack world from outside
    `OPENSTACK_TESTS`: on another worker it would start a second world."""
    outside = [
        item.nodeid
        for item in items
        if OPENSTACK_GROUP in getattr(item, "fixturenames", ())
        and work_unit(item.nodeid) != OPENSTACK_GROUP
    ]
    if outside:
        raise pytest.UsageError(
            f"{outside[0]} (and {len(outside) - 1} more) uses the `openstack` fixture outside "
            f"the OpenStack group's paths {OPENSTACK_TESTS}: move it under tests/openstack/ "
            "or add its path to OPENSTACK_TESTS in tests/helpers/sharing.py"
        )


class SharingScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """xdist's scope scheduling over `work_unit`s, the OpenStack group handed out first (it
    is the longest unit: the world's start and the OpenStack tier)."""

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        if OPENSTACK_GROUP in self.workqueue:
            self.workqueue.move_to_end(OPENSTACK_GROUP, last=False)
        super()._assign_work_unit(node)


def bench_openstack() -> ModuleType:
    """bench/_openstack.py (the benches import it as `_openstack`, with bench/ on their path)."""
    spec = importlib.util.spec_from_file_location("_bench_openstack", BENCH / "_openstack.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def describe_world(world: OpenStackWorld, path: Path) -> tuple[str, str]:
    """Write the world's description for the OpenStack benches (bench/_openstack.py, which
    owns the format) to `path`; the environment variable and value that name it to them."""
    module = bench_openstack()
    path.write_text(json.dumps(module.describe(world)))
    return module.ENV, str(path)
