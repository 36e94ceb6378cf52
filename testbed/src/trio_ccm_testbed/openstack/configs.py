"""The services' configuration files, written from a `Layout`.

Facts carried over from the verified recipe (reference/openstack-testbed): Keystone with
cheap bcrypt (`password_hash_rounds = 4`, else every token costs 0.3 s) and fernet tokens;
Nova with the fake virt driver, no VIF-plugging wait and host discovery every 2 s; Neutron
ML2 with the world's agent-less binding driver (`agentless`), the router and extraroute
service; Octavia with the amphora provider on noop compute/amphora/image drivers and the
world's network driver (`neutron_vip`); one worker per service. Neutron's quotas are
unlimited for every project: Octavia makes a security group per load balancer in the
`service` project, and Neutron's default of 10 put the 11th load balancer made at once in
ERROR (`OverQuotaClient` in the worker's log: the 50-Service benchmark).

Services talk to each other on the catalog's `internal` endpoints (the services' own
ports), so the fault proxy, on the `public` ones, sees and faults the CCM's calls only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from trio_ccm_testbed.openstack.layout import Layout

__all__ = ["COMPUTE_HOST", "SERVICE_USERS", "write_configs"]

COMPUTE_HOST: Final = "trio-ccm-compute"
"""The nova-compute host (the fake driver's one hypervisor)."""

OCTAVIA_WORKER_THREADS: Final = 1
"""Flows the Octavia worker runs at once (oslo.messaging's `executor_thread_pool_size`,
default 64), each with taskflow's serial engine (the parallel one runs a flow's tasks in a
thread pool). Given 21 batch member updates at once, Debian's worker (Zed) stopped for good
with `greenlet.error: cannot switch to a different thread` in its log, every load balancer
left in PENDING_UPDATE (the 50-Service benchmark), and again with 4 flows at once; one
flow at a time it keeps going. A real deployment runs several workers."""

SERVICE_USERS: Final = ("glance", "placement", "nova", "neutron", "octavia")
"""Keystone users of the services (role admin in project `service`)."""


def _auth(layout: Layout, user: str, *, www: bool = True) -> str:
    """A keystoneauth password section body for service user `user` (direct Keystone)."""
    keystone = layout.backend_url("identity")
    lines = [
        f"www_authenticate_uri = {keystone}" if www else "",
        f"auth_url = {keystone}",
        "auth_type = password",
        "project_domain_name = Default",
        "user_domain_name = Default",
        "project_name = service",
        f"username = {user}",
        f"password = {layout.password}",
        f"region_name = {layout.region}",
    ]
    return "\n".join(line for line in lines if line)


def _keystone(layout: Layout) -> str:
    keys = layout.etc / "keystone"
    return f"""[DEFAULT]
debug = False
[identity]
password_hash_rounds = 4
[database]
connection = {layout.database_url("keystone")}
[token]
provider = fernet
expiration = 86400
[fernet_tokens]
key_repository = {keys / "fernet-keys"}
[fernet_receipts]
key_repository = {keys / "fernet-keys"}
[credential]
key_repository = {keys / "credential-keys"}
"""


def _glance(layout: Layout) -> str:
    return f"""[DEFAULT]
bind_host = {layout.host}
bind_port = {layout.ports.glance}
workers = 1
[database]
connection = {layout.database_url("glance")}
[glance_store]
stores = file
default_store = file
filesystem_store_datadir = {layout.data / "glance" / "images"}
[keystone_authtoken]
{_auth(layout, "glance")}
[paste_deploy]
flavor = keystone
config_file = /etc/glance/glance-api-paste.ini
[oslo_concurrency]
lock_path = {layout.data / "locks"}
"""


def _placement(layout: Layout) -> str:
    return f"""[placement_database]
connection = {layout.database_url("placement")}
[api]
auth_strategy = keystone
[keystone_authtoken]
{_auth(layout, "placement")}
"""


def _nova(layout: Layout) -> str:
    data = layout.data / "nova"
    return f"""[DEFAULT]
host = {COMPUTE_HOST}
my_ip = {layout.host}
state_path = {data}
instances_path = {data / "instances"}
transport_url = {layout.transport_url}
compute_driver = fake.FakeDriver
enabled_apis = osapi_compute
osapi_compute_listen = {layout.host}
osapi_compute_listen_port = {layout.ports.nova}
osapi_compute_workers = 1
vif_plugging_is_fatal = False
vif_plugging_timeout = 0
heal_instance_info_cache_interval = -1
periodic_fuzzy_delay = 0
[wsgi]
api_paste_config = /etc/nova/api-paste.ini
[api_database]
connection = {layout.database_url("nova_api")}
[database]
connection = {layout.database_url("nova")}
[keystone_authtoken]
{_auth(layout, "nova")}
[placement]
{_auth(layout, "nova", www=False)}
valid_interfaces = internal
[neutron]
{_auth(layout, "neutron", www=False)}
valid_interfaces = internal
[glance]
region_name = {layout.region}
valid_interfaces = internal
[service_user]
send_service_user_token = False
[conductor]
workers = 1
[scheduler]
workers = 1
discover_hosts_in_cells_interval = 2
[oslo_concurrency]
lock_path = {layout.data / "locks"}
[oslo_messaging_notifications]
driver = noop
"""


def _neutron(layout: Layout) -> str:
    return f"""[DEFAULT]
bind_host = {layout.host}
bind_port = {layout.ports.neutron}
api_workers = 1
rpc_workers = 1
rpc_state_report_workers = 0
core_plugin = ml2
service_plugins = router
allow_overlapping_ips = True
transport_url = {layout.transport_url}
auth_strategy = keystone
api_paste_config = /etc/neutron/api-paste.ini
state_path = {layout.data / "neutron"}
notify_nova_on_port_status_changes = True
notify_nova_on_port_data_changes = True
dhcp_agent_notification = False
[database]
connection = {layout.database_url("neutron")}
[keystone_authtoken]
{_auth(layout, "neutron")}
[nova]
{_auth(layout, "nova", www=False)}
endpoint_type = internal
[oslo_concurrency]
lock_path = {layout.data / "locks"}
[oslo_messaging_notifications]
driver = noop
[ml2]
type_drivers = flat,vlan,vxlan
tenant_network_types = vxlan
mechanism_drivers = agentless
extension_drivers = port_security
[ml2_type_flat]
flat_networks = public
[ml2_type_vxlan]
vni_ranges = 1:10000
[ml2_type_vlan]
network_vlan_ranges = public
[quotas]
quota_network = -1
quota_subnet = -1
quota_port = -1
quota_router = -1
quota_floatingip = -1
quota_security_group = -1
quota_security_group_rule = -1
"""


def _octavia(layout: Layout) -> str:
    certs = layout.data / "octavia" / "certs"
    return f"""[DEFAULT]
transport_url = {layout.transport_url}
executor_thread_pool_size = {OCTAVIA_WORKER_THREADS}
[api_settings]
bind_host = {layout.host}
bind_port = {layout.ports.octavia}
auth_strategy = keystone
enabled_provider_drivers = amphora:'Amphora provider (noop drivers)',octavia:'alias of amphora'
default_provider_driver = amphora
[database]
connection = {layout.database_url("octavia")}
[keystone_authtoken]
{_auth(layout, "octavia")}
[service_auth]
{_auth(layout, "octavia", www=False)}
[controller_worker]
workers = 1
amphora_driver = amphora_noop_driver
compute_driver = compute_noop_driver
network_driver = neutron_vip
image_driver = image_noop_driver
volume_driver = volume_noop_driver
loadbalancer_topology = SINGLE
amp_image_tag = amphora
amp_flavor_id = 1
amp_boot_network_list = 00000000-0000-0000-0000-000000000000
amp_secgroup_list = 00000000-0000-0000-0000-000000000000
client_ca = {certs / "ca.pem"}
[neutron]
region_name = {layout.region}
endpoint_type = internal
valid_interfaces = internal
[nova]
region_name = {layout.region}
endpoint_type = internal
[glance]
region_name = {layout.region}
endpoint_type = internal
[certificates]
cert_generator = local_cert_generator
ca_certificate = {certs / "ca.pem"}
ca_private_key = {certs / "ca.key"}
server_certs_key_passphrase = insecure-key-do-not-use-this-key
[haproxy_amphora]
client_cert = {certs / "client.pem"}
server_ca = {certs / "ca.pem"}
[health_manager]
bind_ip = {layout.host}
heartbeat_key = insecure
[task_flow]
jobboard_enabled = False
engine = serial
[oslo_messaging]
topic = octavia_prov
[oslo_messaging_notifications]
driver = noop
[oslo_concurrency]
lock_path = {layout.data / "locks"}
"""


_FILES: Final = {
    "keystone/keystone.conf": _keystone,
    "glance/glance-api.conf": _glance,
    "placement/placement.conf": _placement,
    "nova/nova.conf": _nova,
    "neutron/neutron.conf": _neutron,
    "octavia/octavia.conf": _octavia,
}


def write_configs(layout: Layout) -> dict[str, Path]:
    """Write every service's configuration file under `layout.etc`; their paths by service
    folder name (`keystone`, `nova`, ...)."""
    written: dict[str, Path] = {}
    for relative, render in _FILES.items():
        path = layout.etc / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(layout))
        written[relative.split("/")[0]] = path
    return written
