"""The `openstack` cloud provider: Nova instances and Neutron routes (Octavia load balancers
beside them), over a small OpenStack client of its own.

Select it with `--cloud-provider=openstack --cloud-config=FILE`, FILE in OCCM's cloud.conf
format (`config.py`; an existing file works unchanged, and an unknown key is refused). The
client (`client.py`: Keystone v3, the catalog, JSON calls on httpx under Trio; its module
docstring is the contract every part uses) is ours: no openstacksdk at run time.
docs/openstack.md has the set-up, the keys and the differences from OCCM.
"""

from __future__ import annotations

from trio_ccm.cloud.openstack.client import Credentials, OpenStackClient
from trio_ccm.cloud.openstack.config import CloudConfig, parse_cloud_config, resolve_clouds_yaml
from trio_ccm.cloud.openstack.errors import (
    ConflictError,
    NotFoundError,
    OpenStackAuthError,
    OpenStackError,
    OpenStackOutcomeUnknownError,
    OpenStackServerError,
    OpenStackThrottledError,
)
from trio_ccm.cloud.openstack.instances import (
    OpenStackInstances,
    node_addresses,
    parse_provider_id,
    provider_id,
)
from trio_ccm.cloud.openstack.provider import OpenStackProvider
from trio_ccm.cloud.openstack.routes import OpenStackRoutes

__all__ = [
    "CloudConfig",
    "ConflictError",
    "Credentials",
    "NotFoundError",
    "OpenStackAuthError",
    "OpenStackClient",
    "OpenStackError",
    "OpenStackInstances",
    "OpenStackOutcomeUnknownError",
    "OpenStackProvider",
    "OpenStackRoutes",
    "OpenStackServerError",
    "OpenStackThrottledError",
    "from_config",
    "node_addresses",
    "parse_cloud_config",
    "parse_provider_id",
    "provider_id",
]


def from_config(config: bytes | None) -> OpenStackProvider:
    """The provider from the cloud.conf's bytes; ConfigError naming the line, the key and
    the fix (a file is required: it holds the credentials). Nothing is called on the
    network here: `initialize()` authenticates."""
    from trio_ccm.errors import ConfigError

    if not config:
        raise ConfigError(
            "--cloud-provider=openstack needs --cloud-config=<cloud.conf> (OCCM's format: "
            "[Global] auth-url, username, password, tenant-name, domain-name, region)"
        )
    parsed = resolve_clouds_yaml(parse_cloud_config(config, source="openstack cloud.conf"))
    return OpenStackProvider(parsed)
