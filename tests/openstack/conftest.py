"""The OpenStack tier: one real OpenStack for the whole session (`openstack`), each test in
resources of its own (named after the test), the proxy's rules and log emptied after each.

Where the world cannot run (not Debian 12, not root, packages missing and no apt), every
test that uses it is skipped with the reason and what to install; under `CI=true` that is
a failure instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from trio_ccm.testing.openstack import OpenStackWorld, Unavailable, open_free_world
from trio_ccm.testing.openstack.processes import group_members


@pytest.fixture(scope="session")
def openstack() -> Iterator[OpenStackWorld]:
    """The session's OpenStack (trio_ccm.testing.openstack; docs/openstack-testworld.md)."""
    try:
        world = open_free_world()
    except Unavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the OpenStack test world cannot run: {exc}")
        pytest.skip(f"OpenStack test world unavailable: {exc}")
    groups = world.processes()
    try:
        yield world
    finally:
        world.stop()
    left = {name: group_members(pid) for name, pid in groups.items() if group_members(pid)}
    if left:
        pytest.fail(f"the OpenStack world's stop left processes running: {left}")


@pytest.fixture(autouse=True)
def _clear_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests that use the world leave no fault rule or logged request to the next one."""
    yield
    if "openstack" in request.fixturenames:
        world: OpenStackWorld = request.getfixturevalue("openstack")
        world.faults.clear()
