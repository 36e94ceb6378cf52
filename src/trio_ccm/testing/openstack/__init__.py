"""The OpenStack test world: the real services on loopback, and a fault proxy before them.

Keystone, Glance, Placement, Nova (fake virt driver), Neutron (ML2 with an agent-less
binding driver) and Octavia (noop amphora drivers, real Neutron VIPs) from Debian 12's
packages, with MariaDB and RabbitMQ, each in its own process group on 127.0.0.1, on ports
that differ from the standard ones (`Ports`); the CCM reaches them through `faults`' proxy.

```python
from trio_ccm.testing.openstack import OpenStackWorld, default_root, Ports

ports = Ports.from_environ()
with OpenStackWorld(default_root(ports), ports) as world:  # ~40 s from a saved dump
    world.write_cloud_conf(path)                           # for --cloud-config
    world.faults.add("compute", method="GET", path="/servers", status=503)
    server = world.boot_server("node-1")
```

`python -m trio_ccm.testing.openstack up|down|status` does the same by hand, and
docs/openstack-testworld.md says what runs, the fixture interface, and the patches the
world makes to third-party services. Runtime modules never import this package.
"""

from trio_ccm.testing.openstack.install import PACKAGES, Unavailable, ensure_installed
from trio_ccm.testing.openstack.layout import DEFAULT_PORT_BASE, Layout, Ports, check_loopback
from trio_ccm.testing.openstack.proxy import SERVICES, Fault, Faults, ProxyThread, serve_proxy
from trio_ccm.testing.openstack.world import (
    OpenStackWorld,
    WorldBusyError,
    default_root,
    open_free_world,
    unique,
)

__all__ = [
    "DEFAULT_PORT_BASE",
    "PACKAGES",
    "SERVICES",
    "Fault",
    "Faults",
    "Layout",
    "OpenStackWorld",
    "Ports",
    "ProxyThread",
    "Unavailable",
    "WorldBusyError",
    "check_loopback",
    "default_root",
    "ensure_installed",
    "open_free_world",
    "serve_proxy",
    "unique",
]
