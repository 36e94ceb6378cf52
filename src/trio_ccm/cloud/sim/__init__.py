"""The `sim` cloud provider: a client of the simulated cloud (`trio_ccm_testbed.cloud`).

Select it with `--cloud-provider=sim --cloud-config=FILE`, FILE holding YAML such as

    url: http://127.0.0.1:8080   # where the simulated cloud listens
    replica: ccm-0               # optional: this replica's name in the cloud's call log

Provider IDs are `sim://<zone>/<instance-id>`; load balancers are named as upstream's
DefaultLoadBalancerName; routes are named `<cluster>-<node uid>`.
"""

from trio_ccm.cloud.provider import default_load_balancer_name
from trio_ccm.cloud.sim.config import from_config
from trio_ccm.cloud.sim.errors import SimCloudError
from trio_ccm.cloud.sim.instances import SimInstances, provider_id
from trio_ccm.cloud.sim.loadbalancers import SimLoadBalancers
from trio_ccm.cloud.sim.provider import SimProvider
from trio_ccm.cloud.sim.routes import SimRoutes

__all__ = [
    "SimCloudError",
    "SimInstances",
    "SimLoadBalancers",
    "SimProvider",
    "SimRoutes",
    "default_load_balancer_name",
    "from_config",
    "provider_id",
]
