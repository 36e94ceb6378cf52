"""The world's EC2 instances as the testbed's kubelets follow them (a `testbed.Fleet`).

`Testbed` reads its cloud on the Trio thread every `poll_s`; moto answers over HTTP, and
boto3 blocks. So `MotoFleet` keeps a snapshot, refreshed by `serve` in a worker thread
every `poll_s` (one paginated `DescribeInstances` of the world's VPC and one
`DescribeRouteTables`, marked as the harness's own so moto's counters never see them),
and the testbed reads the snapshot.

```python
fleet = MotoFleet(world)
await nursery.start(fleet.serve)          # the first snapshot is taken before it returns
testbed = Testbed(api, fleet)
await nursery.start(testbed.serve)        # a kubelet per running instance
```

Kubelets name their Nodes by the instance's private DNS name, as on EC2 with
`--cloud-provider=external`. An instance launched, stopped, started or terminated through
moto (the world's methods, or any EC2 client pointed at the server) is followed within
two `poll_s`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import trio

from trio_ccm.logs import get_logger
from trio_ccm_testbed.aws.world import World

__all__ = ["FleetRoute", "MotoFleet", "MotoInstance"]

log = get_logger("trio_ccm_testbed.aws.fleet")

# EC2 states as a kubelet lives them: it runs from `pending` on, and is silent once the
# instance is stopping or shutting down.
_STATES: Final = {
    "pending": "running",
    "running": "running",
    "stopping": "stopped",
    "stopped": "stopped",
    "shutting-down": "terminated",
    "terminated": "terminated",
}


@dataclass(frozen=True, slots=True)
class MotoInstance:
    """An instance of the snapshot: `name` and `hostname` are its private DNS name."""

    id: str
    name: str
    hostname: str
    state: str
    zone: str


@dataclass(frozen=True, slots=True)
class FleetRoute:
    """A route of the cluster's route table (the VPC's local route left out)."""

    destination: str
    target: str
    blackhole: bool


class MotoFleet:
    """A snapshot of `world`'s instances and routes, refreshed by `serve` (module docstring)."""

    def __init__(self, world: World, *, poll_s: float = 1.0) -> None:
        if not poll_s > 0:
            raise ValueError(f"poll_s={poll_s!r}: must be a positive number of seconds")
        self.world = world
        self.poll_s = poll_s
        self._instances: tuple[MotoInstance, ...] = ()
        self._routes: tuple[FleetRoute, ...] = ()

    def __repr__(self) -> str:
        return f"MotoFleet({self.world.server.url}, vpc {self.world.vpc_id})"

    # -- what the testbed reads -------------------------------------------------------
    def instances(self) -> Sequence[MotoInstance]:
        return self._instances

    def routes(self) -> Sequence[FleetRoute]:
        return self._routes

    def call_counts(self) -> Mapping[str, int]:
        """The CCM's requests to moto, by `service:action` (the harness's own excluded)."""
        return self.world.server.faults.counts()

    # -- refreshing -------------------------------------------------------------------
    async def refresh(self) -> None:
        """Take a new snapshot now (in a worker thread)."""
        self._instances, self._routes = await trio.to_thread.run_sync(self._read)

    async def serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Refresh every `poll_s` until cancelled; started once the first snapshot is taken.
        A failed refresh keeps the last snapshot and is logged."""
        await self.refresh()
        task_status.started()
        while True:
            await trio.sleep(self.poll_s)
            try:
                await self.refresh()
            except Exception as exc:
                log.warning("fleet.refresh-failed", error=f"{type(exc).__name__}: {exc}")

    def _read(self) -> tuple[tuple[MotoInstance, ...], tuple[FleetRoute, ...]]:
        ec2 = self.world.client("ec2")
        instances: list[MotoInstance] = []
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "vpc-id", "Values": [self.world.vpc_id]}]
        )
        for page in pages:
            for reservation in page["Reservations"]:
                instances.extend(_instance(item) for item in reservation["Instances"])
        routes: tuple[FleetRoute, ...] = ()
        if self.world.route_table_id:
            tables = ec2.describe_route_tables(RouteTableIds=[self.world.route_table_id])
            routes = tuple(
                FleetRoute(
                    destination=route.get("DestinationCidrBlock", ""),
                    target=route.get("InstanceId", ""),
                    blackhole=route.get("State") == "blackhole",
                )
                for route in tables["RouteTables"][0]["Routes"]
                if route.get("GatewayId") != "local"
            )
        return tuple(instances), routes


def _instance(item: Mapping[str, Any]) -> MotoInstance:
    dns: str = item.get("PrivateDnsName") or item["InstanceId"]
    return MotoInstance(
        id=item["InstanceId"],
        name=dns,
        hostname=dns,
        state=_STATES.get(item["State"]["Name"], "terminated"),
        zone=item["Placement"]["AvailabilityZone"],
    )
