"""The OpenStack the OpenStack benches run on: the project's test world
(`trio_ccm_testbed.openstack.open_free_world`), started for the run and stopped after; or,
when `TRIO_CCM_OPENSTACK_WORLD` names a JSON file written by `describe`, that running world,
attached to and left running (`make test` runs the quick benches on the test session's world
instead of starting one per bench: tests/bench/test_quick.py).

The description holds what `OpenStackWorld.start()` fills in (endpoints, users, network and
subnet IDs) and where the world lives (folder, ports), so that an attached world's
`write_cloud_conf` and `sdk` work as the started one's do. The attached world goes through
the starting process's fault proxy, like every client of that world.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trio_ccm_testbed.openstack import OpenStackWorld, Ports, open_free_world

ENV = "TRIO_CCM_OPENSTACK_WORLD"
_PATHS = frozenset({"root", "dump_dir", "clouds_yaml", "cloud_conf"})
_SKIPPED = frozenset({"faults", "timings_s"})  # the starting process's own


def describe(world: OpenStackWorld) -> dict[str, Any]:
    """A started world as JSON-ready data, for `attach` in another process."""
    described: dict[str, Any] = {}
    for item in dataclasses.fields(world):
        if item.name in _SKIPPED:
            continue
        value = getattr(world, item.name)
        if item.name == "ports":
            value = value.all()
        elif item.name in _PATHS and value is not None:
            value = str(value)
        described[item.name] = value
    return described


def attach(described: dict[str, Any]) -> OpenStackWorld:
    """The world `describe` described, running in another process (never started or stopped
    from here)."""
    values = dict(described)
    values["ports"] = Ports(**values["ports"])
    for name in _PATHS:
        if values.get(name) is not None:
            values[name] = Path(values[name])
    return OpenStackWorld(**values)


@contextmanager
def openstack_world() -> Iterator[OpenStackWorld]:
    """The world named by `TRIO_CCM_OPENSTACK_WORLD` (left running), else a world started
    here and stopped on the way out."""
    path = os.environ.get(ENV)
    if path:
        yield attach(json.loads(Path(path).read_text()))
        return
    world = open_free_world()
    try:
        yield world
    finally:
        world.stop()
