"""The world's Nova servers as the testbed's kubelets follow them (a `testbed.Fleet`).

`OpenStackFleet` keeps a snapshot of the ccm project's servers and of the cluster router's
routes, refreshed by `serve` every `poll_s` in a worker thread (one server listing and one
router read, on the services' own endpoints, so the proxy's log holds the CCM's calls
only), and the testbed reads the snapshot. Kubelets name their Nodes like the servers, as
OCCM expects (it finds a Node's server by name).

```python
fleet = OpenStackFleet(world)
await fleet.add_servers(5)                # node-1 .. node-5, booted to ACTIVE
await nursery.start(fleet.serve)          # the first snapshot is taken before it returns
testbed = Testbed(api, fleet)
```

A server ACTIVE (or being built) has a running kubelet; SHUTOFF, SUSPENDED, PAUSED or
ERROR: a silent one; DELETED (listed for a moment while Nova finishes) or gone: terminated.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Mapping
from functools import partial
from typing import Final

import trio

from trio_ccm_testbed.openstack.rest import Json, Rest
from trio_ccm_testbed.openstack.world import OpenStackWorld
from trio_ccm_testbed.polling import FleetRoute, Instance, PolledFleet

__all__ = ["FleetRoute", "OpenStackFleet", "Server"]

_RUNNING: Final = frozenset({"ACTIVE", "BUILD", "REBOOT", "HARD_REBOOT", "MIGRATING"})
# Listed for a moment while Nova finishes a deletion: the instance is gone.
_GONE: Final = {"DELETED": "terminated", "SOFT_DELETED": "terminated"}
_ID: Final = re.compile(r"/[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")


Server = Instance
"""A server of the snapshot: `name` and `hostname` are the server's name."""


def action(method: str, target: str) -> str:
    """A request of the proxy's log as an action: IDs and the query string left out
    (`GET /v2.1/servers/{id}`)."""
    path = target.split("?", 1)[0]
    return f"{method} {_ID.sub('/{id}', path)}"


class OpenStackFleet(PolledFleet[Server, FleetRoute]):
    """A snapshot of `world`'s servers and router routes, refreshed by `serve`."""

    def __init__(
        self, world: OpenStackWorld, *, poll_s: float = 1.0, name_prefix: str = ""
    ) -> None:
        super().__init__(poll_s=poll_s)
        self.world = world
        self.name_prefix = name_prefix
        """Only the servers whose name starts with it (a test's own, in a shared world)."""
        self._rest = Rest(
            world.layout,
            world.ccm_auth["username"],
            world.ccm_auth["password"],
            world.ccm_auth["project_name"],
        )

    def __repr__(self) -> str:
        return f"OpenStackFleet({self.world.auth_url})"

    # -- what the testbed reads (beside the snapshot) ---------------------------------
    def call_counts(self) -> Mapping[str, int]:
        """The CCM's requests through the proxy, by `service:action`."""
        counts: Counter[str] = Counter()
        for service in ("identity", "compute", "network", "load-balancer", "image"):
            for method, target in self.world.faults.seen(service):
                counts[f"{service}:{action(method, target)}"] += 1
        return counts

    # -- acting -----------------------------------------------------------------------
    async def add_servers(self, count: int, *, prefix: str = "node", first: int = 1) -> None:
        """Boot `count` servers named `<prefix>-<n>` (n from `first`) and wait until each is
        ACTIVE; in a worker thread."""
        names = [f"{prefix}-{n}" for n in range(first, first + count)]
        await trio.to_thread.run_sync(partial(self._boot, names))

    def _boot(self, names: list[str]) -> None:
        world = self.world
        ids = []
        for name in names:
            body = {
                "server": {
                    "name": name,
                    "flavorRef": world.flavors["m1.tiny"],
                    "imageRef": world.image_id,
                    "networks": [{"uuid": world.network_id}],
                    "availability_zone": world.availability_zone,
                }
            }
            ids.append(self._rest.post("compute", "/servers", body)["server"]["id"])
        pending = set(ids)
        while pending:
            servers = self._rest.get("compute", "/servers/detail")["servers"]
            for server in servers:
                if server["id"] in pending and server["status"] == "ACTIVE":
                    pending.discard(server["id"])
                elif server["id"] in pending and server["status"] == "ERROR":
                    fault = server.get("fault", {}).get("message", "")
                    raise RuntimeError(f"server {server['name']} went to ERROR: {fault}")
            if pending:
                trio.from_thread.check_cancelled()

                time.sleep(0.5)

    # -- refreshing -------------------------------------------------------------------
    def _read(self) -> tuple[tuple[Server, ...], tuple[FleetRoute, ...]]:
        servers = self._rest.get("compute", "/servers/detail")["servers"]
        router = self._rest.get("network", f"/v2.0/routers/{self.world.router_id}")["router"]
        routes = tuple(
            FleetRoute(destination=item["destination"], target=item["nexthop"])
            for item in router.get("routes") or []
        )
        mine = (item for item in servers if item["name"].startswith(self.name_prefix))
        return tuple(_server(item) for item in mine), routes

    def close(self) -> None:
        self._rest.close()


def _server(item: Json) -> Server:
    status = item.get("status", "")
    state = "running" if status in _RUNNING else _GONE.get(status, "stopped")
    return Server(
        id=item["id"],
        name=item["name"],
        hostname=item["name"],
        state=state,
        zone=item.get("OS-EXT-AZ:availability_zone", ""),
    )
