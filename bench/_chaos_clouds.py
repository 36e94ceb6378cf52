"""The clouds `bench/chaos.py` runs its replicas against (`--cloud`): what differs between
them, behind one interface, so the kill schedule, the workload, the referee and the report
stay one copy.

- `sim` (`SimWorld`): a `trio-ccm testbed` process (emulator, sim cloud, kubelets); cloud
  writes from its call log (`/_sim/calls`, dated at arrival, named by each replica's cloud
  config), faults through `/_sim/faults`, state from `/_sim/state`.
- `aws` (`AwsWorld`): in this process, moto on loopback behind the testbed's fault
  middleware (`trio_ccm_testbed.aws`), a cluster-tagged VPC with instances, the emulator on
  loopback and kubelets following the instances (`MotoFleet`). Each start of a replica gets
  its own access key (moto answers any unknown key from its default account), so the
  middleware's arrivals (`Faults.record_arrivals`: wall clock at arrival, access key,
  action) say which process made each call; every action but Describe*/Get*/List* is a
  write. Faults are the middleware's throttling, 5xx and latency rules; state is read back
  from moto (`balancing`) and judged by `trio_ccm_testbed.chaos.find_aws_problems`.

A world also makes its own workload steps where the cloud shows through: adding and
terminating instances, and the one annotation change (sim: the description; aws: the
load-balancer type, CLB <-> NLB, which the provider refuses with an Event, keeping the
load balancer it has).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, Protocol

import httpx
import trio

from trio_ccm.testing.referee import CloudWrite, cloud_writes_of_log
from trio_ccm_testbed.chaos import Problem, find_aws_problems, find_problems
from trio_ccm_testbed.cloud import write_cloud_config
from trio_ccm_testbed.loopback import random_loopback_network

CLUSTER_CIDR: Final = "10.244.0.0/16"
AWS_CLUSTER_ID: Final = "chaos"
AWS_TYPE: Final = "service.beta.kubernetes.io/aws-load-balancer-type"


@dataclass
class CloudLog:
    """What the cloud saw, for the referee and the report."""

    writes: list[CloudWrite]
    calls: int
    by_status: dict[str, int]
    writes_by_read: list[CloudWrite] | None = None
    """The sim cloud's writes dated by when the testbed began handling them (`readWall`),
    to show how a busy testbed would skew the verdict; None for the other clouds."""


class ChaosCloud(Protocol):
    """One cloud of the bench (module docstring)."""

    name: str
    traffic: httpx.AsyncClient | None
    """The sim cloud's admin API when its load balancers carry traffic (bench/_traffic.py)."""

    def replica(self, dir: Path, name: str) -> tuple[list[str], dict[str, str]]:
        """The provider's flags for a replica named `name`, and its environment."""
        ...

    def service_annotations(self, rng: random.Random) -> dict[str, str]:
        """Annotations of a new Service."""
        ...

    async def annotation_step(self, rng: random.Random) -> tuple[str, dict[str, str | None]]:
        """The annotation change of the workload: its kind and the annotations to merge."""
        ...

    async def add_instance(self) -> None: ...

    async def running_instances(self) -> list[tuple[str, str]]:
        """(instance ID, Node name) of each running instance."""
        ...

    async def terminate(self, instance_id: str) -> None: ...

    async def set_faults(self, rng: random.Random) -> list[str]:
        """Replace the fault rules with a random mix; the labels of those added."""
        ...

    async def clear_faults(self) -> None: ...

    async def problems(
        self, nodes: list[dict[str, Any]], services: list[dict[str, Any]]
    ) -> list[Problem]: ...

    async def log(self) -> CloudLog: ...

    def admit(self, services: list[dict[str, Any]]) -> bool:
        """Whether the load balancers of `services` (every Service that has, or may still
        have, one: the workload's next state) fit in the cloud's default quotas; the
        workload holds back a step that would not."""
        ...

    def quota(self) -> dict[str, Any]:
        """The quota figures of the run (aws: the Nodes' group's rules), for the JSON."""
        ...


class NoQuota:
    """A cloud whose quotas the workload cannot reach (sim: `MAX_SERVICES` stays inside its
    ingress pool; OpenStack: the test world's quotas are unlimited)."""

    def admit(self, services: list[dict[str, Any]]) -> bool:
        return True

    def quota(self) -> dict[str, Any]:
        return {}


# -- the sim cloud --------------------------------------------------------------------------
SIM_FAULTS: Final = (
    (
        "error-500-loadbalancers",
        "error",
        {"method": "loadbalancers", "status": 500, "probability": 0.2},
    ),
    ("error-503-routes", "error", {"method": "routes", "status": 503, "probability": 0.2}),
    ("error-500-instances", "error", {"method": "instances", "status": 500, "probability": 0.1}),
    ("throttle", "throttle", {"target": "*", "ratePerSecond": 5, "burst": 10}),
    (
        "latency-loadbalancers",
        "latency",
        {"method": "loadbalancers", "fixedSeconds": 0.05, "jitterSeconds": 2.0},
    ),
    ("latency-all", "latency", {"method": "*", "fixedSeconds": 0.0, "jitterSeconds": 0.3}),
)
FAULT_PROBABILITY: Final = 0.35


@dataclass
class SimWorld(NoQuota):
    """The sim cloud of a `trio-ccm testbed` process (module docstring)."""

    http: httpx.AsyncClient
    traffic: httpx.AsyncClient | None = None
    instances: int = 0
    name: str = "sim"

    def replica(self, dir: Path, name: str) -> tuple[list[str], dict[str, str]]:
        config = dir / f"cloud-{name}.yaml"
        write_cloud_config(config, url=str(self.http.base_url).rstrip("/"), replica=name)
        flags = [
            "--cloud-provider=sim",
            f"--cloud-config={config}",
            f"--cluster-cidr={CLUSTER_CIDR}",
            "--allocate-node-cidrs",
            "--route-reconciliation-period=5s",
        ]
        return flags, dict(os.environ)

    def service_annotations(self, rng: random.Random) -> dict[str, str]:
        return {}

    async def annotation_step(self, rng: random.Random) -> tuple[str, dict[str, str | None]]:
        note = f"rev {rng.randrange(1000)}"
        return "service-annotation", {"sim.trio-ccm.dev/load-balancer-description": note}

    async def add_instance(self) -> None:
        name = f"chaos-{self.instances:04}"
        self.instances += 1
        (await self.http.post("/_sim/instances", json={"name": name})).raise_for_status()

    async def running_instances(self) -> list[tuple[str, str]]:
        listed = await self.http.get("/_sim/instances")
        listed.raise_for_status()
        return [(i["id"], i["name"]) for i in listed.json()["instances"] if i["state"] == "running"]

    async def terminate(self, instance_id: str) -> None:
        (await self.http.post(f"/_sim/instances/{instance_id}/terminate")).raise_for_status()

    async def set_faults(self, rng: random.Random) -> list[str]:
        await self.clear_faults()
        added = []
        for label, kind, rule in SIM_FAULTS:
            if rng.random() < FAULT_PROBABILITY:
                (await self.http.post(f"/_sim/faults/{kind}", json=rule)).raise_for_status()
                added.append(label)
        return added

    async def clear_faults(self) -> None:
        (await self.http.delete("/_sim/faults")).raise_for_status()

    async def problems(
        self, nodes: list[dict[str, Any]], services: list[dict[str, Any]]
    ) -> list[Problem]:
        state = await self.http.get("/_sim/state")
        state.raise_for_status()
        return find_problems(nodes, services, state.json())

    async def log(self) -> CloudLog:
        response = await self.http.get("/_sim/calls")
        response.raise_for_status()
        calls = response.json()["calls"]
        return CloudLog(
            cloud_writes_of_log(calls),
            len(calls),
            dict(Counter(str(c["status"]) for c in calls)),
            writes_by_read=cloud_writes_of_log(calls, clock="readWall"),
        )


async def read_testbed(process: trio.Process) -> tuple[str, str]:
    """The emulator's and the cloud's URLs, from the testbed's stdout."""
    assert process.stdout is not None
    buffer, lines = b"", list[str]()
    while not any("nodes registered" in line for line in lines):
        chunk = await process.stdout.receive_some()
        if not chunk:
            raise RuntimeError(f"the testbed exited before it was ready; it printed {lines}")
        buffer += chunk
        *done, buffer = buffer.split(b"\n")
        lines += [line.decode() for line in done]

    def url(prefix: str) -> str:
        return next(line.rsplit(" ", 1)[1] for line in lines if line.startswith(prefix))

    return url("apiserver listening on"), url("sim cloud listening on")


@contextlib.asynccontextmanager
async def open_sim(
    cli: tuple[str, ...], nodes: int, seed: int, dir: Path, *, traffic: bool
) -> AsyncIterator[tuple[str, Path, SimWorld]]:
    """A `trio-ccm testbed` process with `nodes` instances: the emulator's URL, the
    kubeconfig and the cloud (stopped at the block's end)."""
    kubeconfig, cloud_config = dir / "kubeconfig", dir / "cloud.yaml"
    testbed_argv = [
        *cli,
        "testbed",
        f"--nodes={nodes}",
        f"--seed={seed}",
        f"--kubeconfig-out={kubeconfig}",
        f"--cloud-config-out={cloud_config}",
    ]
    if traffic:
        testbed_argv += [
            # Load balancers on a loopback pool of their own carry traffic (bench/_traffic.py).
            f"--lb-network={random_loopback_network()}",
            "--pods=2",
            # Up to 40 load balancers x the Nodes: checks every 5 s keep the testbed (which
            # also answers the CCMs' cloud calls, dated by their arrival) from starving.
            "--health-check-interval=5s",
        ]
    with (dir / "testbed.log").open("wb") as err:
        testbed = await trio.lowlevel.open_process(testbed_argv, stdout=subprocess.PIPE, stderr=err)
    try:
        with trio.fail_after(60):
            api_url, cloud_url = await read_testbed(testbed)
        async with httpx.AsyncClient(base_url=cloud_url, timeout=30) as cloud:
            yield api_url, kubeconfig, SimWorld(cloud, cloud if traffic else None)
    finally:
        with contextlib.suppress(ProcessLookupError):
            testbed.send_signal(signal.SIGTERM)
        with trio.CancelScope(shield=True), trio.move_on_after(10):  # stopping, even when stopped
            await testbed.wait()
        if testbed.returncode is None:
            testbed.kill()


# -- aws: moto with faults ------------------------------------------------------------------
AWS_FAULTS: Final = (
    # (label, rule kind, action or None for any, service, times)
    ("throttle-elb", "throttle", None, "elasticloadbalancing", 8),
    ("throttle-ec2", "throttle", None, "ec2", 5),
    ("error-500-elb", "error", None, "elasticloadbalancing", 5),
    ("error-500-ec2", "error", None, "ec2", 3),
    ("error-500-create-lb", "error", "CreateLoadBalancer", "elasticloadbalancing", 2),
    ("latency-elb", "latency", None, "elasticloadbalancing", 10),
)
AWS_LATENCY_S: Final = 1.5
AWS_RULES_PER_GROUP: Final = 60
"""AWS's default quota of inbound rules per VPC security group, which moto enforces."""
AWS_RULES_KEPT: Final = 3
"""Of those, left for the cluster's own rules (docs/aws.md, "Security-group rule quotas")."""
LB_FINALIZER: Final = "service.kubernetes.io/load-balancer-cleanup"


def holds_load_balancer(svc: dict[str, Any]) -> bool:
    """Whether a Service has, or may still have, a load balancer: it wants one, or its
    cleanup finalizer says one is not cleaned up yet (a deleted Service, or one turned
    ClusterIP, keeps its rules until the CCM revokes them)."""
    return svc["spec"].get("type") == "LoadBalancer" or LB_FINALIZER in (
        svc["metadata"].get("finalizers") or ()
    )


@dataclass
class AwsWorld:
    """moto with faults, and the cluster on it (module docstring)."""

    world: Any  # trio_ccm_testbed.aws.World
    config: Path
    keys: dict[str, str] = field(default_factory=dict)
    """Access key -> replica name."""
    traffic: httpx.AsyncClient | None = None
    name: str = "aws"
    maybe_nlb: set[str] = field(default_factory=set)
    """Services whose load balancer may be an NLB: annotated `nlb` at some time (a refused
    switch keeps the type the CCM made, and a ClusterIP round trip makes the annotated one)."""
    peak_rules: int = 0

    def node_group_rules(self, services: list[dict[str, Any]]) -> int:
        """The most rules the load balancers of `services` need on the Nodes' shared group
        (docs/aws.md, "Security-group rule quotas"): a Classic ELB one; an NLB a client
        rule per NodePort and source range, a health rule per NodePort and subnet unless
        its source range is 0.0.0.0/0 alone, and the shared MTU rule per client range.
        A Service that may be either type counts as an NLB, which never needs fewer."""
        rules = 0
        client_ranges: set[str] = set()
        for svc in services:
            if not holds_load_balancer(svc):
                continue
            name = svc["metadata"]["name"]
            annotations = svc["metadata"].get("annotations") or {}
            if annotations.get(AWS_TYPE) != "nlb" and name not in self.maybe_nlb:
                rules += 1
                continue
            node_ports = len(svc["spec"].get("ports") or ())
            ranges = svc["spec"].get("loadBalancerSourceRanges") or ["0.0.0.0/0"]
            rules += node_ports * len(ranges)
            if ranges != ["0.0.0.0/0"]:
                rules += node_ports * len(self.world.subnet_ids)
            client_ranges.update(ranges)
        return rules + len(client_ranges)

    def admit(self, services: list[dict[str, Any]]) -> bool:
        rules = self.node_group_rules(services)
        if rules > AWS_RULES_PER_GROUP - AWS_RULES_KEPT:
            return False
        self.peak_rules = max(self.peak_rules, rules)
        self.maybe_nlb |= {
            s["metadata"]["name"]
            for s in services
            if (s["metadata"].get("annotations") or {}).get(AWS_TYPE) == "nlb"
        }
        return True

    def quota(self) -> dict[str, Any]:
        return {
            "node_group_rules_limit": AWS_RULES_PER_GROUP,
            "node_group_rules_budget": AWS_RULES_PER_GROUP - AWS_RULES_KEPT,
            "node_group_rules_peak": self.peak_rules,
        }

    def replica(self, dir: Path, name: str) -> tuple[list[str], dict[str, str]]:
        key = "AKIACHAOS" + name.upper().replace(".", "G")
        self.keys[key] = name
        home = dir / f"home-{name}"
        home.mkdir(exist_ok=True)
        environ = {**os.environ, **self.world.environ(), "HOME": str(home)}
        environ["AWS_ACCESS_KEY_ID"] = key
        flags = [
            "--cloud-provider=aws",
            f"--cloud-config={self.config}",
            f"--cluster-name={AWS_CLUSTER_ID}",
            "--configure-cloud-routes=false",
        ]
        return flags, environ

    def service_annotations(self, rng: random.Random) -> dict[str, str]:
        return {AWS_TYPE: "nlb"} if rng.random() < 0.5 else {}

    async def annotation_step(self, rng: random.Random) -> tuple[str, dict[str, str | None]]:
        # A switch either way: a Service without the annotation is a Classic ELB.
        return "service-type-switch", {AWS_TYPE: "nlb" if rng.random() < 0.5 else None}

    async def add_instance(self) -> None:
        await self.world.add_instances(1)

    async def running_instances(self) -> list[tuple[str, str]]:
        def read() -> list[tuple[str, str]]:
            ec2 = self.world.client("ec2")
            found = []
            for page in ec2.get_paginator("describe_instances").paginate(
                Filters=[
                    {"Name": "vpc-id", "Values": [self.world.vpc_id]},
                    {"Name": "instance-state-name", "Values": ["running"]},
                ]
            ):
                for reservation in page["Reservations"]:
                    found += [
                        (i["InstanceId"], i["PrivateDnsName"]) for i in reservation["Instances"]
                    ]
            return found

        return await trio.to_thread.run_sync(read)

    async def terminate(self, instance_id: str) -> None:
        await self.world.terminate(instance_id)

    async def set_faults(self, rng: random.Random) -> list[str]:
        faults = self.world.server.faults
        faults.clear_rules()
        added = []
        for label, kind, action, service, times in AWS_FAULTS:
            if rng.random() >= FAULT_PROBABILITY:
                continue
            if kind == "throttle":
                faults.throttle(action, service=service, times=times)
            elif kind == "error":
                faults.server_error(action, service=service, times=times)
            else:
                faults.latency(AWS_LATENCY_S, action, service=service, times=times)
            added.append(label)
        return added

    async def clear_faults(self) -> None:
        self.world.server.faults.clear_rules()

    async def problems(
        self, nodes: list[dict[str, Any]], services: list[dict[str, Any]]
    ) -> list[Problem]:
        from botocore.exceptions import ClientError

        from trio_ccm_testbed.aws import balancing

        try:
            moto = await balancing(self.world)
            running = {name for _id, name in await self.running_instances()}
        except ClientError as exc:  # something went while it was read: a replica is at work
            return [Problem("missing", f"moto changed while read back: {exc}")]
        group = f"nodes.{self.world.cluster_id}"
        return find_aws_problems(nodes, services, moto, node_group=group, running=running)

    async def log(self) -> CloudLog:
        arrivals = self.world.server.faults.arrivals()
        writes = [
            CloudWrite(a.at, self.keys.get(a.key, a.key), f"{a.service}:{a.action}", a.target)
            for a in arrivals
            if a.mutating
        ]
        faulted = sum(self.world.server.faults.faulted().values())
        return CloudLog(
            writes, len(arrivals), {"moto": len(arrivals) - faulted, "faulted": faulted}
        )


@contextlib.asynccontextmanager
async def open_aws(nodes: int, seed: int, dir: Path) -> AsyncIterator[tuple[str, Path, AwsWorld]]:
    """In this process: moto with faults (every request's arrival recorded), a cluster with
    `nodes` instances, the emulator on loopback and its kubelets; the emulator's URL, the
    kubeconfig and the cloud."""
    from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver
    from trio_ccm_testbed.aws import MotoFleet, World, open_moto
    from trio_ccm_testbed.testbed import Testbed

    async with open_moto() as moto, trio.open_nursery() as nursery:
        world = await World.create(moto, cluster_id=AWS_CLUSTER_ID)
        await world.add_instances(nodes)
        moto.faults.record_arrivals()
        fleet = MotoFleet(world)
        await nursery.start(fleet.serve)
        api = ApiServer(seed=seed)
        listening = await nursery.start(partial(serve_apiserver, api, host="127.0.0.1", port=0))
        kubeconfig = listening.write_kubeconfig(dir / "kubeconfig")
        testbed = Testbed(api, fleet, seed=seed)
        await nursery.start(testbed.serve)
        config = dir / "cloud.conf"
        config.write_bytes(world.cloud_config())
        try:
            yield listening.url, kubeconfig, AwsWorld(world, config)
        finally:
            nursery.cancel_scope.cancel()


# -- openstack: the real test world with its fault proxy ----------------------------------------
OPENSTACK_CLUSTER: Final = "chaos"
OPENSTACK_FAULTS: Final = (
    # (label, service, method, path, rule keys)
    ("error-500-octavia-post", "load-balancer", "POST", None, {"status": 500, "times": 2}),
    ("conflict-409-octavia-put", "load-balancer", "PUT", None, {"status": 409, "times": 3}),
    (
        "throttle-429-octavia",
        "load-balancer",
        None,
        None,
        {"status": 429, "retry_after_s": 1, "times": 5},
    ),
    ("error-503-floatingips", "network", "POST", r"/floatingips", {"status": 503, "times": 2}),
    ("latency-octavia", "load-balancer", "GET", None, {"delay_s": 1.5, "times": 10}),
)


@dataclass
class OpenStackWorld(NoQuota):
    """The OpenStack test world behind its fault proxy (module docstring)."""

    world: Any  # trio_ccm_testbed.openstack.OpenStackWorld
    fleet: Any  # trio_ccm_testbed.openstack.fleet.OpenStackFleet
    dir: Path
    starts: list[tuple[float, str, str]] = field(default_factory=list)
    """(wall time, user, replica name) of each replica start."""
    servers: int = 0
    traffic: httpx.AsyncClient | None = None
    name: str = "openstack"

    @staticmethod
    def user(slot: str) -> str:
        return f"{OPENSTACK_CLUSTER}-{slot}"

    def replica(self, dir: Path, name: str) -> tuple[list[str], dict[str, str]]:
        import time

        user = self.user(name.split(".", 1)[0])
        config = self.dir / f"cloud-{user}.conf"
        if not config.exists():
            self.world.write_cloud_conf(
                config,
                extra={
                    "Global": {"username": user},
                    "LoadBalancer": {
                        "subnet-id": self.world.subnet_id,
                        "floating-network-id": self.world.external_network_id,
                    },
                },
            )
        self.starts.append((time.time(), user, name))
        home = dir / f"home-{name}"
        home.mkdir(exist_ok=True)
        flags = [
            "--cloud-provider=openstack",
            f"--cloud-config={config}",
            f"--cluster-name={OPENSTACK_CLUSTER}",
            "--configure-cloud-routes=false",
        ]
        return flags, {**os.environ, "HOME": str(home)}

    def service_annotations(self, rng: random.Random) -> dict[str, str]:
        return {}

    async def annotation_step(self, rng: random.Random) -> tuple[str, dict[str, str | None]]:
        limit = str(rng.choice((-1, 100, 1000, 5000)))
        return "service-connection-limit", {"loadbalancer.openstack.org/connection-limit": limit}

    async def add_instance(self) -> None:
        self.servers += 1
        await self.fleet.add_servers(
            1, prefix=f"{OPENSTACK_CLUSTER}-node", first=self.servers + 100
        )

    async def running_instances(self) -> list[tuple[str, str]]:
        return [(s.id, s.name) for s in self.fleet.instances() if s.state == "running"]

    async def terminate(self, instance_id: str) -> None:
        await trio.to_thread.run_sync(self.world.delete_server, instance_id)

    async def set_faults(self, rng: random.Random) -> list[str]:
        faults = self.world.faults
        faults.clear_rules()
        added = []
        for label, service, method, path, rule in OPENSTACK_FAULTS:
            if rng.random() < FAULT_PROBABILITY:
                faults.add(service, method=method, path=path, **rule)
                added.append(label)
        return added

    async def clear_faults(self) -> None:
        self.world.faults.clear_rules()

    def _read(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        conn = self.world.sdk(admin=True)
        listeners = {x.id: (x.protocol_port, x.protocol) for x in conn.load_balancer.listeners()}
        lbs = [
            {
                "id": lb.id,
                "name": lb.name or "",
                "provisioning_status": lb.provisioning_status,
                "vip_port_id": lb.vip_port_id,
                "listeners": [
                    listeners[x["id"]] for x in lb.listeners or [] if x["id"] in listeners
                ],
            }
            for lb in conn.load_balancer.load_balancers()
            if lb.provisioning_status != "DELETED"
        ]
        fips = [
            {
                "floating_ip_address": f.floating_ip_address,
                "description": f.description or "",
                "port_id": f.port_id,
            }
            for f in conn.network.ips()
        ]
        return lbs, fips

    async def problems(
        self, nodes: list[dict[str, Any]], services: list[dict[str, Any]]
    ) -> list[Problem]:
        from trio_ccm_testbed.chaos import find_openstack_problems

        try:
            lbs, fips = await trio.to_thread.run_sync(self._read)
        except Exception as exc:  # openstacksdk's errors: something went while it was read
            return [Problem("missing", f"OpenStack changed while read back: {exc!r}")]
        return find_openstack_problems(nodes, services, lbs, fips, cluster=OPENSTACK_CLUSTER)

    def _replica_at(self, user: str, at: float) -> str:
        """The replica that signed in as `user` at `at`: the slot's latest start before."""
        found = [name for started, u, name in self.starts if u == user and started <= at]
        return found[-1] if found else user

    async def log(self) -> CloudLog:
        arrivals = self.world.faults.arrivals()
        writes = [
            CloudWrite(a.at, self._replica_at(a.user, a.at), f"{a.service}:{a.method}", a.target)
            for a in arrivals
            # A write by no known token's user is judged too (the referee: never led).
            if a.mutating and (a.user.startswith(f"{OPENSTACK_CLUSTER}-") or not a.user)
        ]
        others = sum(1 for a in arrivals if not a.user.startswith(f"{OPENSTACK_CLUSTER}-"))
        return CloudLog(writes, len(arrivals) - others, {"proxied": len(arrivals) - others})


def _openstack_users(world: Any, slots: int) -> None:
    """A Keystone user per replica slot, with the ccm user's roles in its project
    (blocking; users that exist are kept)."""
    from trio_ccm_testbed.openstack.bootstrap import CCM_ROLES

    conn = world.sdk(admin=True)
    project = world.ccm_auth["project_id"]
    for slot in range(slots):
        name = OpenStackWorld.user(f"r{slot}")
        user = conn.identity.find_user(name, domain_id="default") or conn.identity.create_user(
            name=name, password=world.ccm_auth["password"], domain_id="default"
        )
        for role in CCM_ROLES:
            found = conn.identity.find_role(role)
            conn.identity.assign_project_role_to_user(project, user, found)


@contextlib.asynccontextmanager
async def open_openstack(
    nodes: int, seed: int, dir: Path, replicas: int, world: Any = None
) -> AsyncIterator[tuple[str, Path, OpenStackWorld]]:
    """In this process: the OpenStack test world (`world`, or one started here on ports
    from TRIO_CCM_OPENSTACK_PORT_BASE and stopped at the end) with `nodes` servers, a user
    per replica slot, the proxy recording arrivals, the emulator on loopback and its
    kubelets; the emulator's URL, the kubeconfig and the cloud."""
    from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver
    from trio_ccm_testbed.openstack import open_free_world
    from trio_ccm_testbed.openstack.fleet import OpenStackFleet
    from trio_ccm_testbed.testbed import Testbed

    own = world is None
    if own:
        world = await trio.to_thread.run_sync(open_free_world)
    try:
        async with trio.open_nursery() as nursery:
            await trio.to_thread.run_sync(_openstack_users, world, replicas)
            fleet = OpenStackFleet(world, name_prefix=f"{OPENSTACK_CLUSTER}-")
            cloud = OpenStackWorld(world, fleet, dir)
            await fleet.add_servers(nodes, prefix=f"{OPENSTACK_CLUSTER}-node")
            world.faults.record_arrivals()
            await nursery.start(fleet.serve)
            api = ApiServer(seed=seed)
            listening = await nursery.start(partial(serve_apiserver, api, host="127.0.0.1", port=0))
            kubeconfig = listening.write_kubeconfig(dir / "kubeconfig")
            await nursery.start(Testbed(api, fleet, seed=seed).serve)
            try:
                yield listening.url, kubeconfig, cloud
            finally:
                nursery.cancel_scope.cancel()
                fleet.close()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_clean_openstack, world)
            if own:
                await trio.to_thread.run_sync(world.stop)


def _clean_openstack(world: Any) -> None:
    """The bench's servers, load balancers and floating IPs deleted, once the check has
    judged them (a shared world's next user starts clean; blocking)."""
    conn = world.sdk(admin=True)
    for server in conn.compute.servers(all_projects=True):
        if server.name.startswith(f"{OPENSTACK_CLUSTER}-"):
            conn.compute.delete_server(server.id, ignore_missing=True)
    for lb in conn.load_balancer.load_balancers():
        if (lb.name or "").startswith(f"kube_service_{OPENSTACK_CLUSTER}_"):
            _delete_when_not_pending(conn, lb.id)
    for fip in conn.network.ips():
        if (fip.description or "").endswith(f" from cluster {OPENSTACK_CLUSTER}"):
            conn.network.delete_ip(fip.id, ignore_missing=True)


def _delete_when_not_pending(conn: Any, lb_id: str, *, within_s: float = 300.0) -> None:
    """Delete a load balancer (cascade), waiting while Octavia answers 409 because a replica
    killed at the end left it PENDING_UPDATE (blocking: a cleanup's thread)."""
    from openstack.exceptions import ConflictException  # the test world's extra

    deadline = time.monotonic() + within_s
    while True:
        try:
            conn.load_balancer.delete_load_balancer(lb_id, cascade=True, ignore_missing=True)
            return
        except ConflictException:
            if time.monotonic() > deadline:
                raise
            time.sleep(2.0)  # a worker thread, not the event loop
