"""The `aws` cloud provider: EC2 instances, Service load balancers (Classic ELB, NLB) and VPC
routes, over a small AWS client of its own.

Select it with `--cloud-provider=aws --cloud-config=FILE`, FILE in cloud-provider-aws's
format (`config.py`; an existing file works unchanged). Credentials come from the AWS SDKs'
chain (`credentials.py`: environment, profiles, IRSA, Pod Identity, the instance role).
The client (`client.py`) uses botocore only as the codec (serialise, SigV4-sign, parse)
and httpx for the I/O, so every call is cancellable under Trio. docs/aws.md has the set-up
(IAM policy, IRSA), what is supported, and the differences from cloud-provider-aws.

Layout: `client.py` (+ `codec.py`, `errors.py`) is the AWS client for every service the
provider speaks (EC2, ELB, ELBv2, STS); `ec2.py` shapes the EC2 calls; `instances.py`,
`routes.py` and `loadbalancers.py` implement the capabilities over `context.py` (what they
share) and `lookup.py` (bulk lookups); the load balancers read the Service in
`annotations.py` (a pure plan) and carry it out in `elb.py` (Classic ELB), `elbv2.py` (NLB)
and `network.py` (subnets, security groups).
"""

from __future__ import annotations

from trio_ccm.cloud.aws.client import AwsClient, Endpoint, endpoint_for
from trio_ccm.cloud.aws.config import CloudConfig, ServiceOverride, parse_cloud_config
from trio_ccm.cloud.aws.credentials import AwsCredentials
from trio_ccm.cloud.aws.errors import (
    AwsCredentialsError,
    AwsError,
    AwsServerError,
    AwsThrottledError,
)
from trio_ccm.cloud.aws.instances import (
    LABEL_ZONE_ID,
    AwsInstances,
    ProviderIdError,
    instance_id_from_provider_id,
    provider_id,
)
from trio_ccm.cloud.aws.loadbalancers import AwsLoadBalancers
from trio_ccm.cloud.aws.policy import IAM_ACTIONS
from trio_ccm.cloud.aws.provider import AwsProvider
from trio_ccm.cloud.aws.routes import AwsRoutes, RouteTableError

__all__ = [
    "IAM_ACTIONS",
    "LABEL_ZONE_ID",
    "AwsClient",
    "AwsCredentials",
    "AwsCredentialsError",
    "AwsError",
    "AwsInstances",
    "AwsLoadBalancers",
    "AwsProvider",
    "AwsRoutes",
    "AwsServerError",
    "AwsThrottledError",
    "CloudConfig",
    "Endpoint",
    "ProviderIdError",
    "RouteTableError",
    "ServiceOverride",
    "endpoint_for",
    "from_config",
    "instance_id_from_provider_id",
    "parse_cloud_config",
    "provider_id",
]


def from_config(config: bytes | None) -> AwsProvider:
    """The provider from the cloud-config file's bytes (None: no file, every default);
    ConfigError naming the line, the key and the fix. Nothing is called on the network here:
    the region and the cluster ID are settled by `initialize()`."""
    parsed = parse_cloud_config(config, source="aws cloud-config") if config else CloudConfig()
    return AwsProvider(parsed)
