"""The OpenStack tier: one real OpenStack for the whole session (`openstack`, in
tests/conftest.py, which the OpenStack benches' quick runs share), each test in resources of
its own (named after the test), the proxy's rules and log emptied after each.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trio_ccm_testbed.openstack import OpenStackWorld


@pytest.fixture(autouse=True)
def _clear_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests that use the world leave no fault rule or logged request to the next one."""
    yield
    if "openstack" in request.fixturenames:
        world: OpenStackWorld = request.getfixturevalue("openstack")
        world.faults.clear()
