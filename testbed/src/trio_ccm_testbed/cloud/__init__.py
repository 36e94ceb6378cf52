"""A simulated cloud for tests and demos, served in-process or over HTTP, with faults.

cloud = SimCloud(seed=1)
node = cloud.add_instance("node-1")
async with httpx.AsyncClient(transport=cloud.transport(), base_url="http://sim-cloud"):
    ...
listening = await nursery.start(serve_sim_cloud, cloud)   # real HTTP on loopback
write_cloud_config(path, url=listening.url, replica="ccm-0")  # for `--cloud-provider=sim`

The HTTP API is documented in docs/sim-cloud.md.
"""

from trio_ccm_testbed._http import Request, Response
from trio_ccm_testbed.cloud.config import cloud_config, write_cloud_config
from trio_ccm_testbed.cloud.errors import SimApiError
from trio_ccm_testbed.cloud.faults import (
    METHOD_FAMILIES,
    ErrorRule,
    FaultRule,
    Faults,
    LatencyRule,
    ThrottleRule,
)
from trio_ccm_testbed.cloud.listener import Listening, serve_sim_cloud
from trio_ccm_testbed.cloud.model import (
    Call,
    CloudRoute,
    Instance,
    LoadBalancer,
    LoadBalancerPort,
)
from trio_ccm_testbed.cloud.server import SimCloud
from trio_ccm_testbed.cloud.transport import SimCloudTransport

__all__ = [
    "METHOD_FAMILIES",
    "Call",
    "CloudRoute",
    "ErrorRule",
    "FaultRule",
    "Faults",
    "Instance",
    "LatencyRule",
    "Listening",
    "LoadBalancer",
    "LoadBalancerPort",
    "Request",
    "Response",
    "SimApiError",
    "SimCloud",
    "SimCloudTransport",
    "ThrottleRule",
    "cloud_config",
    "serve_sim_cloud",
    "write_cloud_config",
]
