"""Builders shared by the openstack suites (tests/openstack): Node manifests, servers booted
and deleted through the world's helpers, the provider and client opened on the world."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from tests.helpers.aws import UNINITIALIZED, Cluster
from trio_ccm.cloud.openstack import Credentials, OpenStackClient, OpenStackProvider, from_config
from trio_ccm_testbed.aws import ready_condition


def manifest(
    name: str,
    *,
    provider_id: str = "",
    ready: bool = True,
    pod_cidr: str = "",
    internal_ip: str = "",
) -> dict[str, Any]:
    """The Node a kubelet `--cloud-provider=external` registers (tainted uninitialized)."""
    spec: dict[str, Any] = {
        "taints": [
            {"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"},
        ]
    }
    if provider_id:
        spec["providerID"] = provider_id
    if pod_cidr:
        spec["podCIDR"] = pod_cidr
        spec["podCIDRs"] = [pod_cidr]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {
            "conditions": [ready_condition(ready)],
            "addresses": [
                *([{"type": "InternalIP", "address": internal_ip}] if internal_ip else []),
                {"type": "Hostname", "address": name},
            ],
        },
    }


def initialised(cluster: Cluster, name: str) -> bool:
    node = cluster.node(name)
    return UNINITIALIZED not in cluster.taints(name) and bool(node["spec"].get("providerID"))


def addresses(cluster: Cluster, name: str) -> list[tuple[str, str]]:
    return [(a["type"], a["address"]) for a in cluster.node(name)["status"].get("addresses", [])]


def network_unavailable(cluster: Cluster, name: str) -> str | None:
    for condition in cluster.node(name)["status"].get("conditions", []):
        if condition["type"] == "NetworkUnavailable":
            return str(condition["status"])
    return None


async def boot(world: Any, *names: str, **options: Any) -> list[dict[str, Any]]:
    """Servers booted together (each waited for ACTIVE by the world)."""
    booted: dict[str, dict[str, Any]] = {}

    async def one(name: str) -> None:
        booted[name] = await trio.to_thread.run_sync(lambda: world.boot_server(name, **options))

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(one, name)
    return [booted[n] for n in names]


async def delete(world: Any, servers: Sequence[dict[str, Any]]) -> None:
    async with trio.open_nursery() as nursery:
        for server in servers:
            nursery.start_soon(trio.to_thread.run_sync, world.delete_server, server["id"])


def fixed_ip(server: dict[str, Any]) -> str:
    for entries in server["addresses"].values():
        for entry in entries:
            if entry.get("OS-EXT-IPS:type", "fixed") == "fixed" and entry["version"] == 4:
                return str(entry["addr"])
    raise AssertionError(f"server {server['name']} has no fixed IPv4 address")


@asynccontextmanager
async def open_provider(
    world: Any, tmp_path: Path, extra: dict[str, dict[str, str]] | None = None
) -> AsyncIterator[OpenStackProvider]:
    path = world.write_cloud_conf(tmp_path / "cloud.conf", extra=extra)
    provider = from_config(path.read_bytes())
    try:
        yield provider
    finally:
        await provider.aclose()


def password_credentials(world: Any, **changes: str) -> Credentials:
    """The ccm user's password credentials, with `changes`."""
    auth = world.ccm_auth
    fields = {
        "auth_url": world.auth_url,
        "username": auth["username"],
        "password": auth["password"],
        "project_name": auth["project_name"],
        "user_domain_name": auth["user_domain_name"],
        "project_domain_name": auth["project_domain_name"],
    }
    fields.update(changes)
    return Credentials(**fields)


@asynccontextmanager
async def open_client(
    world: Any, credentials: Credentials | None = None, **options: Any
) -> AsyncIterator[OpenStackClient]:
    client = OpenStackClient(
        credentials or password_credentials(world), region=world.region, **options
    )
    try:
        yield client
    finally:
        await client.aclose()
