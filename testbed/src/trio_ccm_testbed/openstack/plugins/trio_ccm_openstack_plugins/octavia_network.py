"""An Octavia network driver for a world with no amphorae (test world only).

Octavia's `network_noop_driver` invents the VIP (an address and a `vip_port_id` that
Neutron does not know), so a floating IP cannot be attached to a load balancer. This driver
is the real Neutron driver (allowed-address-pairs) for everything a user of the API sees:
the VIP port, its address from the chosen subnet, the VIP security group, every lookup.
What would plug ports into amphora VMs (none exist: the compute driver is the noop one) is
handed to the noop driver.

In octavia-worker only, a lookup of a network, port or subnet Neutron does not know (the
objects the noop driver invented while "plugging" an amphora) falls back to the noop
driver; without that, members go to ERROR while the load balancer is ACTIVE. octavia-api
keeps Neutron's answer, so the API still rejects an unknown subnet.

Which Neutron extensions are enabled is asked once per process, not once per driver: Octavia
makes a new network driver for nearly every task of a flow, and each asked Neutron for four
extensions (about 2,000 requests in a run of the OpenStack test tier, on the one serial
worker's critical path). The world's Neutron never changes its extensions while it runs.
"""

import os
import sys

from octavia.network import base
from octavia.network.drivers.neutron import allowed_address_pairs
from octavia.network.drivers.noop_driver import driver as noop
from oslo_config import cfg

_IN_WORKER = "worker" in os.path.basename(sys.argv[0] if sys.argv else "")

_EXTENSIONS = {}
"""Neutron extension alias -> enabled, for every driver of this process (module docstring)."""

# The driver methods that act on amphorae; `plug_vip` is written out below.
_AMPHORA_METHODS = (
    "plug_aap_port",
    "unplug_aap_port",
    "unplug_vip",
    "plug_network",
    "unplug_network",
    "get_plugged_networks",
    "failover_preparation",
    "plug_port",
    "get_network_configs",
    "wait_for_port_detach",
    "plug_fixed_ip",
    "unplug_fixed_ip",
    "set_port_admin_state_up",
)


class NeutronVipNetworkDriver(allowed_address_pairs.AllowedAddressPairsDriver):
    """Real Neutron VIPs and lookups; amphora plumbing by the noop driver."""

    def __init__(self):
        super().__init__()
        self._noop = noop.NoopNetworkDriver()

    @property
    def _check_extension_cache(self):
        """The process's one cache of Octavia's extension checks (module docstring)."""
        return _EXTENSIONS

    @_check_extension_cache.setter
    def _check_extension_cache(self, value):
        # Octavia's driver starts each instance with an empty cache: the shared one is kept
        _EXTENSIONS.update(value)

    def _lookup(self, kind, missing, object_id, context):
        try:
            return getattr(super(), "get_" + kind)(object_id, context=context)
        except missing:
            if not _IN_WORKER:
                raise
            return getattr(self._noop, "get_" + kind)(object_id)

    def get_network(self, network_id, context=None):
        """The network from Neutron (the amphora boot network is the noop driver's)."""
        if network_id in (cfg.CONF.controller_worker.amp_boot_network_list or []):
            return self._noop.get_network(network_id)
        return self._lookup("network", base.NetworkNotFound, network_id, context)

    def get_port(self, port_id, context=None):
        """The port from Neutron (in the worker: else the noop driver's)."""
        return self._lookup("port", base.PortNotFound, port_id, context)

    def get_subnet(self, subnet_id, context=None):
        """The subnet from Neutron (in the worker: else the noop driver's)."""
        return self._lookup("subnet", base.SubnetNotFound, subnet_id, context)

    def plug_vip(self, load_balancer, vip):
        """The VIP security group on the real VIP port; the amphora side is noop."""
        self.update_vip_sg(load_balancer, vip)
        return self._noop.plug_vip(load_balancer, vip)


def _to_noop(name):
    def method(self, *args, **kwargs):
        return getattr(self._noop, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"The noop driver's `{name}` (there is no amphora)."
    return method


for _name in _AMPHORA_METHODS:
    setattr(NeutronVipNetworkDriver, _name, _to_noop(_name))
