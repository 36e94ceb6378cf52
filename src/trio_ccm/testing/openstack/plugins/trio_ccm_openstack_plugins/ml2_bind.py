"""An ML2 mechanism driver that binds ports with no L2 agent (test world only).

The world has no data plane. With a stock mechanism driver (openvswitch) and no agent
reporting, Neutron cannot bind a server's port, and Nova puts the server in ERROR after its
retries. This driver binds every normal (non-SR-IOV) port on the first segment offered,
with the `ovs` VIF type the fake virt driver accepts, and marks the port ACTIVE.
"""

from neutron_lib import constants
from neutron_lib.api.definitions import portbindings
from neutron_lib.plugins.ml2 import api

_VIF_DETAILS = {portbindings.CAP_PORT_FILTER: True, portbindings.OVS_HYBRID_PLUG: False}


class AgentlessBindDriver(api.MechanismDriver):
    """Binds each normal port to the first segment it is offered."""

    def initialize(self):
        """Nothing to set up: there is no agent to talk to."""

    def bind_port(self, context):
        """Bind `context`'s port as an ovs port on its first candidate segment."""
        vnic_type = context.current.get(portbindings.VNIC_TYPE, portbindings.VNIC_NORMAL)
        if vnic_type != portbindings.VNIC_NORMAL or not context.segments_to_bind:
            return
        segment = context.segments_to_bind[0]
        context.set_binding(
            segment[api.ID],
            portbindings.VIF_TYPE_OVS,
            _VIF_DETAILS,
            status=constants.PORT_STATUS_ACTIVE,
        )
