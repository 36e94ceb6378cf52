"""The world's contents, created idempotently through the services' REST APIs.

- `identity()`: project `service` with the services' users (role admin), the roles
  `member`, `reader`, `load-balancer_member`, `load-balancer_admin`; project `k8s` with
  user `ccm` (roles `member` and `load-balancer_member` only: what a CCM needs); the
  catalog, `public` endpoints on the fault proxy, `internal` and `admin` on the services.
- `resources()`: the external network `public` (flat, shared by the router) with its
  subnet; in project `k8s` the network `k8s-net` with subnet 10.0.0.0/24 and the router
  `k8s-router`, gateway on `public`, interface on the subnet; flavors; a tiny raw image;
  the availability zone `az1` (an aggregate holding the compute host); quotas of `k8s`
  lifted (a benchmark boots a hundred servers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from trio_ccm.testing.openstack.configs import COMPUTE_HOST, SERVICE_USERS
from trio_ccm.testing.openstack.layout import CATALOG, Layout
from trio_ccm.testing.openstack.rest import Json, Rest

__all__ = [
    "AVAILABILITY_ZONE",
    "CCM_PROJECT",
    "CCM_USER",
    "FLAVORS",
    "IMAGE",
    "Resources",
    "catalog",
    "identity",
    "project_id",
    "resources",
    "wait_compute",
]

CCM_PROJECT: Final = "k8s"
CCM_USER: Final = "ccm"
CCM_ROLES: Final = ("member", "load-balancer_member")
AVAILABILITY_ZONE: Final = "az1"
AGGREGATE: Final = "trio-ccm-az1"
IMAGE: Final = "trio-ccm-tiny"
FLAVORS: Final = (
    # name, id, RAM MB, vCPUs, disk GB
    ("m1.tiny", "1", 512, 1, 1),
    ("m1.small", "2", 2048, 1, 20),
    ("m1.medium", "3", 4096, 2, 40),
)
NETWORK: Final = "k8s-net"
SUBNET: Final = "k8s-subnet"
SUBNET_CIDR: Final = "10.0.0.0/24"
ROUTER: Final = "k8s-router"
EXTERNAL_NETWORK: Final = "public"
EXTERNAL_CIDR: Final = "172.24.4.0/24"
# A raw "disk" of 1 KiB: the fake virt driver never reads it.
_IMAGE_DATA: Final = b"trio-ccm test world image\n".ljust(1024, b"\0")


def _one(items: list[Json], what: str) -> Json | None:
    if len(items) > 1:
        raise RuntimeError(f"{what}: {len(items)} found, expected at most one")
    return items[0] if items else None


def _ensure(rest: Rest, service: str, path: str, key: str, name: str, body: Json) -> Json:
    """The `key` object named `name` at `path`, created with `body` when missing."""
    found = _one(rest.get(service, path, name=name)[key + "s"], f"{key} {name!r}")
    if found is not None:
        return found
    return rest.post(service, path, {key: body})[key]


def identity(admin: Rest, layout: Layout) -> dict[str, str]:
    """Projects, roles, users and catalog (module docstring); the IDs by name."""
    path = "/projects"
    service_project = _ensure(
        admin, "identity", path, "project", "service", {"name": "service", "domain_id": "default"}
    )
    k8s = _ensure(
        admin,
        "identity",
        path,
        "project",
        CCM_PROJECT,
        {"name": CCM_PROJECT, "domain_id": "default"},
    )
    roles = {
        name: _ensure(admin, "identity", "/roles", "role", name, {"name": name})["id"]
        for name in ("admin", "member", "reader", "load-balancer_member", "load-balancer_admin")
    }
    for user_name in (*SERVICE_USERS, CCM_USER):
        user = _ensure(
            admin,
            "identity",
            "/users",
            "user",
            user_name,
            {"name": user_name, "password": layout.password, "domain_id": "default"},
        )
        project, granted = (
            (k8s, CCM_ROLES) if user_name == CCM_USER else (service_project, ("admin",))
        )
        for role in granted:
            admin.put(
                "identity", f"/projects/{project['id']}/users/{user['id']}/roles/{roles[role]}"
            )
    catalog(admin, layout)
    return {"service": service_project["id"], CCM_PROJECT: k8s["id"]}


def catalog(admin: Rest, layout: Layout) -> None:
    """The catalog's services and endpoints set to `layout`'s ports (a restored dump may
    hold another world's)."""
    for kind, name, _ in CATALOG:
        _catalog_entry(admin, layout, kind, name)


def project_id(admin: Rest, name: str) -> str:
    """The ID of project `name` (which must exist)."""
    found = _one(admin.get("identity", "/projects", name=name)["projects"], f"project {name!r}")
    if found is None:
        raise RuntimeError(f"project {name!r} is missing: delete the saved dump to rebuild it")
    project: str = found["id"]
    return project


def _catalog_entry(admin: Rest, layout: Layout, kind: str, name: str) -> None:
    services = admin.get("identity", "/services", type=kind)["services"]
    service = services[0] if services else None
    if service is None:
        service = admin.post("identity", "/services", {"service": {"name": name, "type": kind}})
        service = service["service"]
    wanted = {
        "public": layout.public_url(kind),
        "internal": layout.backend_url(kind),
        "admin": layout.backend_url(kind),
    }
    endpoints = admin.get("identity", "/endpoints", service_id=service["id"])["endpoints"]
    for endpoint in endpoints:
        url = wanted.pop(endpoint["interface"], None)
        if url is None or endpoint.get("region_id") != layout.region:
            admin.call("DELETE", "identity", f"/endpoints/{endpoint['id']}")
            if url is not None:
                wanted[endpoint["interface"]] = url
        elif endpoint["url"] != url:
            admin.call(
                "PATCH", "identity", f"/endpoints/{endpoint['id']}", json={"endpoint": {"url": url}}
            )
    for interface, url in wanted.items():
        admin.post(
            "identity",
            "/endpoints",
            {
                "endpoint": {
                    "service_id": service["id"],
                    "interface": interface,
                    "url": url,
                    "region_id": layout.region,
                }
            },
        )


def wait_compute(admin: Rest, *, timeout_s: float) -> None:
    """Until nova-compute is up and its hypervisor is listed (then Nova can boot)."""
    deadline = time.monotonic() + timeout_s
    while True:
        services = admin.get("compute", "/os-services", binary="nova-compute")["services"]
        up = [item for item in services if item["state"] == "up"]
        hypervisors = admin.get("compute", "/os-hypervisors")["hypervisors"] if up else []
        if up and hypervisors:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"nova-compute did not come up in {timeout_s:.0f} s (services {services})"
            )
        time.sleep(0.5)


@dataclass(frozen=True)
class Resources:
    """What `resources()` made: the IDs the fixture hands out."""

    network_id: str
    subnet_id: str
    external_network_id: str
    external_subnet_id: str
    router_id: str
    image_id: str
    flavors: dict[str, str]


def resources(admin: Rest, *, project_id: str) -> Resources:
    """Networks, router, flavors, image, zone, quotas (module docstring)."""
    external = _ensure(
        admin,
        "network",
        "/v2.0/networks",
        "network",
        EXTERNAL_NETWORK,
        {
            "name": EXTERNAL_NETWORK,
            "router:external": True,
            "provider:network_type": "flat",
            "provider:physical_network": "public",
        },
    )
    external_subnet = _ensure(
        admin,
        "network",
        "/v2.0/subnets",
        "subnet",
        EXTERNAL_NETWORK + "-subnet",
        {
            "name": EXTERNAL_NETWORK + "-subnet",
            "network_id": external["id"],
            "ip_version": 4,
            "cidr": EXTERNAL_CIDR,
            "gateway_ip": "172.24.4.1",
            "enable_dhcp": False,
        },
    )
    network = _ensure(
        admin,
        "network",
        "/v2.0/networks",
        "network",
        NETWORK,
        {"name": NETWORK, "project_id": project_id},
    )
    subnet = _ensure(
        admin,
        "network",
        "/v2.0/subnets",
        "subnet",
        SUBNET,
        {
            "name": SUBNET,
            "project_id": project_id,
            "network_id": network["id"],
            "ip_version": 4,
            "cidr": SUBNET_CIDR,
            "gateway_ip": "10.0.0.1",
        },
    )
    router = _one(
        admin.get("network", "/v2.0/routers", name=ROUTER)["routers"], f"router {ROUTER!r}"
    )
    if router is None:
        router = admin.post(
            "network",
            "/v2.0/routers",
            {
                "router": {
                    "name": ROUTER,
                    "project_id": project_id,
                    "external_gateway_info": {"network_id": external["id"]},
                }
            },
        )["router"]
        admin.put(
            "network",
            f"/v2.0/routers/{router['id']}/add_router_interface",
            {"subnet_id": subnet["id"]},
        )
    flavors = {}
    for name, flavor_id, ram, vcpus, disk in FLAVORS:
        found = admin.call("GET", "compute", f"/flavors/{flavor_id}", ok=(200, 404))
        if found is None or "flavor" not in found:
            body = {"name": name, "id": flavor_id, "ram": ram, "vcpus": vcpus, "disk": disk}
            found = admin.post("compute", "/flavors", {"flavor": body})
        flavors[name] = found["flavor"]["id"]
    image = _one(admin.get("image", "/v2/images", name=IMAGE)["images"], f"image {IMAGE!r}")
    if image is None or image["status"] != "active":
        if image is not None:
            admin.call("DELETE", "image", f"/v2/images/{image['id']}")
        image = admin.post(
            "image",
            "/v2/images",
            {
                "name": IMAGE,
                "disk_format": "raw",
                "container_format": "bare",
                "visibility": "public",
            },
        )
        admin.call(
            "PUT",
            "image",
            f"/v2/images/{image['id']}/file",
            content=_IMAGE_DATA,
            headers={"Content-Type": "application/octet-stream"},
        )
    aggregates = admin.get("compute", "/os-aggregates")["aggregates"]
    aggregate = next((item for item in aggregates if item["name"] == AGGREGATE), None)
    if aggregate is None:
        aggregate = admin.post(
            "compute",
            "/os-aggregates",
            {"aggregate": {"name": AGGREGATE, "availability_zone": AVAILABILITY_ZONE}},
        )["aggregate"]
    if COMPUTE_HOST not in (aggregate.get("hosts") or []):
        admin.post(
            "compute",
            f"/os-aggregates/{aggregate['id']}/action",
            {"add_host": {"host": COMPUTE_HOST}},
        )
    unlimited = ("instances", "cores", "ram")
    admin.put(
        "compute",
        f"/os-quota-sets/{project_id}",
        {"quota_set": dict.fromkeys(unlimited, -1)},
    )
    neutron_quotas = (
        "network", "subnet", "port", "router", "floatingip", "security_group",
        "security_group_rule",
    )  # fmt: skip
    admin.put("network", f"/v2.0/quotas/{project_id}", {"quota": dict.fromkeys(neutron_quotas, -1)})
    return Resources(
        network_id=network["id"],
        subnet_id=subnet["id"],
        external_network_id=external["id"],
        external_subnet_id=external_subnet["id"],
        router_id=router["id"],
        image_id=image["id"],
        flavors=flavors,
    )
