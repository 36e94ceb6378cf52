"""OpenStack node waves: N Nova servers (the fake virt driver), N Nodes registered at once,
initialised by trio-ccm's `openstack` provider; then the periodic address sync over them.

    python bench/openstack_nodes.py [--nodes N] [--quick] [--clouds-yaml PATH --cloud NAME]

The OpenStack is the project's test world (`trio_ccm_testbed.openstack`, started for the
run and stopped after, or the running one that `TRIO_CCM_OPENSTACK_WORLD` describes:
`make test`'s, bench/_openstack.py), or an existing one named by `--clouds-yaml`/`--cloud`
(the ccm user's cloud; an admin cloud is not needed). N servers (`bench-os--<i>`, default 100,
`--quick` 4) are booted on one network by one multi-create call and waited for (`seed_s`,
not part of the wave); those the fake compute host fails (ERROR, `boot_failed`) are
deleted and the wave runs on the others (`nodes`). The emulator (in-process transport) gets
the Nodes, named
like the servers, as kubelets `--cloud-provider=external` register them (no provider ID,
the uninitialized taint). A replica (cloud-node-controller only,
`--cloud-batch-size=1000`) runs until the last Node has lost the taint (`init_s`). The
provider's client counts every request it sends by service and action (`calls`). Then a
fresh replica (new provider, new token) runs its first address sync over the N initialised
Nodes; its Nova and Neutron calls until it has answered for every Node are
`calls_per_sync_period` (a steady-state period costs the same).

`occm_model_calls`: what OCCM's algorithm costs for the same cluster (study §1.1): per Node,
at initialisation and again every sync period, GET server (or the server list by name),
GET flavor, GET ports?device_id: 3 Nova+Neutron calls per Node, i.e. 3 N per wave and 3 N
per period (plus one Keystone token per process).

Prints a table, then one JSON object as the last line. Benchmarks never assert on time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

from _common import machine_line, print_figures, quiet_logging
from _openstack import openstack_world
from trio_ccm.cloud.openstack import OpenStackProvider, from_config
from trio_ccm.testing.harness import run_ccm
from trio_ccm_testbed.apiserver import ApiServer

# openstacksdk (the bench's peer client). This script is not called bench/openstack.py: with
# bench/ first on sys.path, that name would shadow openstacksdk for every bench script.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import openstack.config
    import openstack.connection

UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
FLAGS = (
    "--controllers=cloud-node-controller",
    "--cloud-batch-size=1000",
    "--kube-api-qps=200",
    "--kube-api-burst=400",
    "--node-status-update-frequency=1h",
)
PREFIX = "bench-os-"


class Cloud:
    """The OpenStack the bench runs on: its cloud.conf and an openstacksdk connection."""

    def __init__(self, conn: Any, cloud_conf: bytes, network_id: str) -> None:
        self.conn = conn
        self.cloud_conf = cloud_conf
        self.network_id = network_id


@contextmanager
def open_cloud(clouds_yaml: str, cloud: str, workdir: Path) -> Iterator[Cloud]:
    if clouds_yaml:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            region = openstack.config.OpenStackConfig(config_files=[clouds_yaml]).get_one(
                cloud=cloud
            )
            conn = openstack.connection.Connection(config=region)
        auth = region.config["auth"]
        conf = (
            "[Global]\n"
            f"auth-url = {auth['auth_url']}\n"
            f"username = {auth['username']}\n"
            f"password = {auth['password']}\n"
            f"tenant-name = {auth['project_name']}\n"
            f"user-domain-name = {auth.get('user_domain_name', 'Default')}\n"
            f"tenant-domain-name = {auth.get('project_domain_name', 'Default')}\n"
            f"region = {region.region_name}\n"
        ).encode()
        net = conn.network.find_network("bench-os-net")
        if net is None:
            net = conn.network.create_network(name="bench-os-net")
            conn.network.create_subnet(
                network_id=net.id, cidr="10.40.0.0/22", ip_version=4, name="bench-os-sub"
            )
        yield Cloud(conn, conf, net.id)
        return
    # The project's test world: started here, or the running one `make test` names
    # (bench/_openstack.py).
    with openstack_world() as world:
        path = world.write_cloud_conf(workdir / "cloud.conf")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conn = world.sdk()
        yield Cloud(conn, path.read_bytes(), world.network_id)


def boot(cloud: Cloud, nodes: int) -> tuple[list[dict[str, Any]], int]:
    """N servers named PREFIX-<i>, made by one multi-create call (left-overs of an earlier
    run are deleted first); returns the ACTIVE ones and how many went to ERROR (deleted;
    an overloaded fake compute host fails some, the wave runs on the others)."""
    conn = cloud.conn
    delete_all(cloud)
    image = next(iter(conn.image.images()))
    flavor = min(conn.compute.flavors(), key=lambda f: f.ram)
    conn.compute.create_server(
        name=PREFIX,
        image_id=image.id,
        flavor_id=flavor.id,
        networks=[{"uuid": cloud.network_id}],
        min_count=nodes,
        max_count=nodes,
    )
    deadline = time.monotonic() + 120 + 6 * nodes
    while True:
        servers = [s for s in conn.compute.servers(name=f"^{PREFIX}") if s.name.startswith(PREFIX)]
        settled = [s for s in servers if s.status in ("ACTIVE", "ERROR")]
        if len(servers) >= nodes and len(settled) == len(servers):
            failed = [s for s in servers if s.status == "ERROR"]
            for server in failed:
                conn.compute.delete_server(server.id, ignore_missing=True)
            return [s.to_dict() for s in servers if s.status == "ACTIVE"], len(failed)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{nodes} servers not settled in time")
        time.sleep(2)


def delete_all(cloud: Cloud) -> None:
    conn = cloud.conn
    for server in conn.compute.servers(name=f"^{PREFIX}"):
        conn.compute.delete_server(server.id, ignore_missing=True)
    deadline = time.monotonic() + 300
    while any(True for _ in conn.compute.servers(name=f"^{PREFIX}")):
        if time.monotonic() > deadline:
            raise TimeoutError("bench servers not deleted in time")
        time.sleep(1)


def node_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-11-27T10:00:00Z",
                    "lastTransitionTime": "2026-11-27T10:00:00Z",
                }
            ],
            "addresses": [{"type": "Hostname", "address": name}],
        },
    }


def tainted(api: ApiServer, names: list[str]) -> int:
    count = 0
    for name in names:
        taints = api.get("v1", "Node", name)["spec"].get("taints", [])
        count += any(t["key"] == UNINITIALIZED for t in taints)
    return count


def nova_neutron(calls: dict[str, int]) -> int:
    return sum(n for key, n in calls.items() if key.startswith(("compute:", "network:")))


async def wave(cloud: Cloud, names: list[str]) -> dict[str, Any]:
    api = ApiServer(seed=1)
    for name in names:
        api.create(node_manifest(name))
    provider: OpenStackProvider = from_config(cloud.cloud_conf)
    started = time.perf_counter()
    try:
        async with run_ccm(api, provider, *FLAGS, now=lambda: dt.datetime.now(dt.UTC)):
            while tainted(api, names):  # noqa: ASYNC110 - the emulator's state, polled
                await trio.sleep(0.05)
            init_s = time.perf_counter() - started
        calls = dict(provider.client.statistics().calls)
    finally:
        await provider.aclose()
    # The periodic sync: a fresh replica's first pass over the initialised Nodes.
    second: OpenStackProvider = from_config(cloud.cloud_conf)
    try:
        async with run_ccm(api, second, *FLAGS, now=lambda: dt.datetime.now(dt.UTC)):
            swept = second._instances.addresses  # the provider's own record of answers
            while len(set(swept) & set(names)) < len(names):  # noqa: ASYNC110 - polled
                await trio.sleep(0.05)
        sync = dict(second.client.statistics().calls)
    finally:
        await second.aclose()
    nodes = len(names)
    return {
        "nodes": nodes,
        "init_s": round(init_s, 2),
        "calls": calls,
        "nova_neutron_calls": nova_neutron(calls),
        "calls_per_sync_period": nova_neutron(sync),
        "sync_calls": sync,
        "occm_model_calls": {"wave": 3 * nodes, "sync_period": 3 * nodes},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="4 servers")
    parser.add_argument("--clouds-yaml", default="", help="use this OpenStack (clouds.yaml)")
    parser.add_argument("--cloud", default="", help="the ccm user's cloud in --clouds-yaml")
    parser.add_argument("--keep", action="store_true", help="leave the servers booted")
    args = parser.parse_args()
    nodes = 4 if args.quick else args.nodes
    quiet_logging()
    import tempfile

    with (
        tempfile.TemporaryDirectory() as tmp,
        open_cloud(args.clouds_yaml, args.cloud, Path(tmp)) as cloud,
    ):
        started = time.perf_counter()
        try:
            servers, failed = boot(cloud, nodes)
            seed_s = time.perf_counter() - started
            figures = trio.run(wave, cloud, sorted(s["name"] for s in servers))
        finally:
            if not args.keep:
                delete_all(cloud)
    figures["seed_s"] = round(seed_s, 1)
    figures["boot_failed"] = failed
    print(machine_line())
    print(f"{'nodes':>24}  {figures['nodes']}")
    print(f"{'init_s':>24}  {figures['init_s']}")
    print(f"{'Nova+Neutron (wave)':>24}  {figures['nova_neutron_calls']}  (OCCM: {3 * nodes})")
    print(f"{'calls_per_sync_period':>24}  {figures['calls_per_sync_period']}  (OCCM: {3 * nodes})")
    for key, count in sorted(figures["calls"].items()):
        print(f"{key:>60}  {count}")
    print_figures(figures)


if __name__ == "__main__":
    main()
