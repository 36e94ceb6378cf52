"""THROWAWAY (osprov development only; the lead takes osworld's conftest when merging):
the `openstack` session fixture built on the dev OpenStack at /work/osdev, with the fixture
interface of OPENSTACK.md minus `faults` (osworld's proxy)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

OSDEV = Path("/work/osdev")
PASSWORD = "osprobe"


@dataclass
class DevWorld:
    auth_url: str
    region: str
    ccm_auth: dict[str, str]
    admin_auth: dict[str, str]
    clouds_yaml: Path
    network_id: str = ""
    network_name: str = ""
    subnet_id: str = ""
    subnet_cidr: str = ""
    external_network_id: str = ""
    external_network_name: str = ""
    router_id: str = ""
    image_id: str = ""
    flavors: dict[str, str] = field(default_factory=dict)
    availability_zone: str = "nova"
    faults: Any = None

    def sdk(self, admin: bool = False) -> Any:
        import warnings

        import openstack.config
        import openstack.connection

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            region = openstack.config.OpenStackConfig(config_files=[str(self.clouds_yaml)]).get_one(
                cloud="osprobe" if admin else "osprobe-ccm"
            )
            return openstack.connection.Connection(config=region)

    def write_cloud_conf(
        self, path: Path, *, extra: dict[str, dict[str, str]] | None = None
    ) -> Path:
        sections: dict[str, dict[str, str]] = {
            "Global": {
                "auth-url": self.auth_url,
                "username": self.ccm_auth["username"],
                "password": self.ccm_auth["password"],
                "tenant-name": self.ccm_auth["project_name"],
                "domain-name": "Default",
                "region": self.region,
            }
        }
        for name, keys in (extra or {}).items():
            sections.setdefault(name, {}).update(keys)
        lines = []
        for name, keys in sections.items():
            lines.append(f"[{name}]")
            lines.extend(f"{k} = {v}" for k, v in keys.items())
        path.write_text("\n".join(lines) + "\n")
        return path

    def boot_server(
        self,
        name: str,
        *,
        flavor: str | None = None,
        network_id: str | None = None,
        wait: bool = True,
    ) -> dict[str, Any]:
        conn = self.sdk()
        server = conn.compute.create_server(
            name=name,
            image_id=self.image_id,
            flavor_id=self.flavors[flavor or "m1.tiny"],
            networks=[{"uuid": network_id or self.network_id}],
        )
        if wait:
            server = conn.compute.wait_for_server(server, wait=120)
        return dict(server.to_dict())

    def stop_server(self, server_id: str, *, timeout_s: float = 120.0) -> None:
        conn = self.sdk()
        conn.compute.stop_server(server_id)
        conn.compute.wait_for_server(
            conn.compute.get_server(server_id), status="SHUTOFF", wait=int(timeout_s)
        )

    def delete_server(self, server_id: str, *, timeout_s: float = 120.0) -> None:
        conn = self.sdk()
        conn.compute.delete_server(server_id, ignore_missing=True)
        deadline = time.monotonic() + timeout_s
        while conn.compute.find_server(server_id, ignore_missing=True) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"server {server_id} not deleted in {timeout_s} s")
            time.sleep(0.5)


def _setup(world: DevWorld) -> None:
    admin = world.sdk(admin=True)
    ccm = world.sdk()
    project = admin.identity.find_project("k8s")
    admin.set_compute_quotas(project.id, instances=300, cores=600, ram=300 * 1024)
    admin.set_network_quotas(project.id, port=1000, network=50, subnet=50)
    ext = admin.network.find_network("osprov-ext")
    if ext is None:
        ext = admin.network.create_network(name="osprov-ext", is_router_external=True)
        admin.network.create_subnet(
            network_id=ext.id, name="osprov-ext-sub", cidr="172.24.4.0/24", ip_version=4
        )
    net = ccm.network.find_network("osprov-net")
    if net is None:
        net = ccm.network.create_network(name="osprov-net")
        sub = ccm.network.create_subnet(
            network_id=net.id, name="osprov-sub", cidr="10.20.0.0/24", ip_version=4
        )
    sub = ccm.network.find_subnet("osprov-sub")
    router = ccm.network.find_router("osprov-router")
    if router is None:
        router = ccm.network.create_router(
            name="osprov-router", external_gateway_info={"network_id": ext.id}
        )
        ccm.network.add_interface_to_router(router, subnet_id=sub.id)
    world.network_id, world.network_name = net.id, net.name
    world.subnet_id, world.subnet_cidr = sub.id, sub.cidr
    world.external_network_id, world.external_network_name = ext.id, ext.name
    world.router_id = router.id
    world.image_id = next(iter(ccm.image.images())).id
    world.flavors = {f.name: f.id for f in ccm.compute.flavors()}


@pytest.fixture(scope="session")
def openstack() -> DevWorld:
    """The dev OpenStack (/work/osdev) as the `openstack` fixture."""
    if not (OSDEV / "clouds.yaml").exists():
        pytest.skip("no /work/osdev/clouds.yaml")
    os.environ.pop("OS_CLOUD", None)
    auth = {
        "username": "ccm",
        "password": PASSWORD,
        "project_name": "k8s",
        "user_domain_name": "Default",
        "project_domain_name": "Default",
    }
    world = DevWorld(
        auth_url="http://127.0.0.1:5000/v3",
        region="RegionOne",
        ccm_auth={**auth, "project_id": ""},
        admin_auth={**auth, "username": "admin", "project_name": "admin", "project_id": ""},
        clouds_yaml=OSDEV / "clouds.yaml",
    )
    _setup(world)
    world.ccm_auth["project_id"] = world.sdk().current_project_id
    return world
