"""A cluster on moto: a VPC, a subnet per zone, a route table and instances, as an EC2
cluster made by kops or eksctl looks to its CCM, plus the cloud-config pointing at moto.

```python
async with open_moto() as moto:
    world = await World.create(moto, cluster_id="demo")
    instances = await world.add_instances(3)
    provider = trio_ccm.cloud.aws.from_config(world.cloud_config())
    for instance in instances:
        api.create(world.node_manifest(instance))   # a kubelet's Node, named by DNS name
```

Everything the cluster owns carries `kubernetes.io/cluster/<id>=owned` (or the legacy
`KubernetesCluster=<id>` with `legacy_tag=True`). The VPC's main route table routes to an
internet gateway (so the subnets are public, where internet-facing load balancers go), and
instances are launched in the cluster-tagged Nodes' security group (`node_group_id`).
Instances are named by private DNS name (`ip-10-0-….ec2.internal` in us-east-1),
as EC2 names them by default, and have a `Name` tag with the same value. Set-up calls go
through boto3 in worker threads, marked so
the fault middleware neither faults nor counts them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import botocore.exceptions
import botocore.parsers
import trio

from trio_ccm_testbed.aws.server import TEST_CREDENTIALS, MotoServer

__all__ = [
    "UNINITIALIZED_TAINT",
    "Balancing",
    "Instance",
    "World",
    "balancing",
    "certificate",
    "ready_condition",
]

UNINITIALIZED_TAINT: Final = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}
_VPC_CIDR: Final = "10.0.0.0/16"
_RUN_BATCH: Final = 100
_EXAMPLE_AMI: Final = "ami-12c6146b"  # moto's example AMI


def ready_condition(ready: bool) -> dict[str, str]:
    """A kubelet's Ready condition (True, or False with KubeletNotReady)."""
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "lastHeartbeatTime": "2026-11-21T10:00:00Z",
        "lastTransitionTime": "2026-11-21T10:00:00Z",
    }


@dataclass(frozen=True, slots=True)
class Instance:
    """An instance of the world, as its kubelet's Node knows it."""

    id: str
    private_dns_name: str
    private_ip: str
    zone: str
    subnet_id: str
    instance_type: str

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.id}"


@dataclass
class World:
    """The cluster's resources on a MotoServer (see the module docstring)."""

    server: MotoServer
    region: str
    cluster_id: str
    legacy_tag: bool
    zones: tuple[str, ...]
    vpc_id: str = ""
    subnet_ids: dict[str, str] = field(default_factory=dict)
    route_table_id: str = ""
    node_group_id: str = ""
    image_id: str = ""
    instances: dict[str, Instance] = field(default_factory=dict)
    _next_zone: itertools.cycle[str] | None = None

    # -- building --------------------------------------------------------------------
    @classmethod
    async def create(
        cls,
        server: MotoServer,
        *,
        cluster_id: str = "test-cluster",
        region: str = "us-east-1",
        zones: Sequence[str] = ("a", "b", "c"),
        legacy_tag: bool = False,
        route_table: bool = True,
    ) -> World:
        """The VPC, one subnet per zone (suffixes or full names) and the route table."""
        full = tuple(z if z.startswith(region) else f"{region}{z}" for z in zones)
        world = cls(server, region, cluster_id, legacy_tag, full)
        await trio.to_thread.run_sync(world._build, route_table)
        return world

    @property
    def cluster_tags(self) -> dict[str, str]:
        if self.legacy_tag:
            return {"KubernetesCluster": self.cluster_id}
        return {f"kubernetes.io/cluster/{self.cluster_id}": "owned"}

    def client(self, service: str) -> Any:
        """A boto3 client of the world (blocking: call it in a worker thread)."""
        return self.server.client(service, self.region)

    def tag_specifications(
        self, kind: str, extra: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """EC2 TagSpecifications with the cluster tag (and `extra`) for a `kind` resource."""
        tags = {**self.cluster_tags, **(extra or {})}
        return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]

    def _build(self, route_table: bool) -> None:
        ec2 = self.client("ec2")
        self.vpc_id = ec2.create_vpc(
            CidrBlock=_VPC_CIDR, TagSpecifications=self.tag_specifications("vpc")
        )["Vpc"]["VpcId"]
        for index, zone in enumerate(self.zones):
            self.subnet_ids[zone] = ec2.create_subnet(
                VpcId=self.vpc_id,
                CidrBlock=f"10.0.{index * 32}.0/19",
                AvailabilityZone=zone,
                TagSpecifications=self.tag_specifications("subnet"),
            )["Subnet"]["SubnetId"]
        gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=self.vpc_id)
        main = ec2.describe_route_tables(
            Filters=[
                {"Name": "vpc-id", "Values": [self.vpc_id]},
                {"Name": "association.main", "Values": ["true"]},
            ]
        )["RouteTables"][0]["RouteTableId"]
        ec2.create_route(RouteTableId=main, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)
        self.node_group_id = ec2.create_security_group(
            GroupName=f"nodes.{self.cluster_id}",
            Description="the cluster's Nodes",
            VpcId=self.vpc_id,
            TagSpecifications=self.tag_specifications("security-group"),
        )["GroupId"]
        if route_table:
            self.route_table_id = ec2.create_route_table(
                VpcId=self.vpc_id, TagSpecifications=self.tag_specifications("route-table")
            )["RouteTable"]["RouteTableId"]
        self.image_id = _EXAMPLE_AMI
        try:
            ec2.describe_images(ImageIds=[_EXAMPLE_AMI])
        except Exception:  # not in this region's AMIs: any x86 one (0.7 s: moto has 1,300)
            images = ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])
            self.image_id = images["Images"][0]["ImageId"]
        self._next_zone = itertools.cycle(self.zones)

    # -- instances -------------------------------------------------------------------
    async def add_instances(
        self,
        count: int,
        *,
        zone: str | None = None,
        instance_type: str = "m5.large",
        tagged: bool = True,
        tags: Mapping[str, str] | None = None,
    ) -> list[Instance]:
        """Launch `count` instances (round-robin over the zones unless `zone` is given)."""
        return await trio.to_thread.run_sync(
            self._launch, count, zone, instance_type, tagged, dict(tags or {})
        )

    def _launch(
        self,
        count: int,
        zone: str | None,
        instance_type: str,
        tagged: bool,
        tags: dict[str, str],
    ) -> list[Instance]:
        assert self._next_zone is not None
        ec2 = self.client("ec2")
        per_zone: dict[str, int] = {}
        for _ in range(count):
            chosen = zone if zone is not None else next(self._next_zone)
            chosen = chosen if chosen.startswith(self.region) else f"{self.region}{chosen}"
            per_zone[chosen] = per_zone.get(chosen, 0) + 1
        launched: list[Instance] = []
        for chosen, n in per_zone.items():
            while n > 0:
                batch = min(n, _RUN_BATCH)
                n -= batch
                all_tags = {**(self.cluster_tags if tagged else {}), **tags}
                spec = (
                    [
                        {
                            "ResourceType": "instance",
                            "Tags": [{"Key": k, "Value": v} for k, v in all_tags.items()],
                        }
                    ]
                    if all_tags
                    else []
                )
                answer = ec2.run_instances(
                    ImageId=self.image_id,
                    MinCount=batch,
                    MaxCount=batch,
                    InstanceType=instance_type,
                    SubnetId=self.subnet_ids[chosen],
                    SecurityGroupIds=[self.node_group_id],
                    TagSpecifications=spec,
                )
                for item in answer["Instances"]:
                    instance = Instance(
                        id=item["InstanceId"],
                        private_dns_name=item["PrivateDnsName"],
                        private_ip=item["PrivateIpAddress"],
                        zone=item["Placement"]["AvailabilityZone"],
                        subnet_id=item["SubnetId"],
                        instance_type=item["InstanceType"],
                    )
                    self.instances[instance.id] = instance
                    launched.append(instance)
        return launched

    async def terminate(self, *ids: str) -> None:
        await trio.to_thread.run_sync(
            lambda: self.client("ec2").terminate_instances(InstanceIds=list(ids))
        )

    async def stop(self, *ids: str) -> None:
        await trio.to_thread.run_sync(
            lambda: self.client("ec2").stop_instances(InstanceIds=list(ids))
        )

    async def start(self, *ids: str) -> None:
        await trio.to_thread.run_sync(
            lambda: self.client("ec2").start_instances(InstanceIds=list(ids))
        )

    async def describe(self, instance_id: str) -> dict[str, Any]:
        """The instance as DescribeInstances shows it (boto3's dict)."""

        def describe() -> dict[str, Any]:
            answer = self.client("ec2").describe_instances(InstanceIds=[instance_id])
            found: dict[str, Any] = answer["Reservations"][0]["Instances"][0]
            return found

        return await trio.to_thread.run_sync(describe)

    async def source_dest_check(self, instance_id: str) -> bool:
        def read() -> bool:
            answer = self.client("ec2").describe_instance_attribute(
                InstanceId=instance_id, Attribute="sourceDestCheck"
            )
            return bool(answer["SourceDestCheck"]["Value"])

        return await trio.to_thread.run_sync(read)

    async def routes(self, route_table_id: str | None = None) -> list[dict[str, Any]]:
        """The route table's routes (boto3's dicts), the local route excluded."""

        def read() -> list[dict[str, Any]]:
            answer = self.client("ec2").describe_route_tables(
                RouteTableIds=[route_table_id or self.route_table_id]
            )
            routes: list[dict[str, Any]] = answer["RouteTables"][0]["Routes"]
            return [r for r in routes if r.get("GatewayId") != "local"]

        return await trio.to_thread.run_sync(read)

    async def add_route(self, cidr: str, instance_id: str) -> None:
        await trio.to_thread.run_sync(
            lambda: self.client("ec2").create_route(
                RouteTableId=self.route_table_id,
                DestinationCidrBlock=cidr,
                InstanceId=instance_id,
            )
        )

    # -- what the CCM and the kubelets are given -------------------------------------
    def cloud_config(self, **global_keys: str) -> bytes:
        """The cloud-config for trio-ccm (or the Go CCM): [Global] region, cluster ID and
        VPC, and every service's endpoint overridden to moto. `global_keys` adds [Global] keys."""
        key = "KubernetesClusterTag" if self.legacy_tag else "KubernetesClusterID"
        lines = ["[Global]", f"Region = {self.region}", f"{key} = {self.cluster_id}"]
        lines.append(f"VPC = {self.vpc_id}")  # not on EC2: the metadata service cannot tell
        lines += [f"{name} = {value}" for name, value in global_keys.items()]
        for index, service in enumerate(("ec2", "elasticloadbalancing", "sts"), start=1):
            lines += [
                "",
                f'[ServiceOverride "{index}"]',
                f"Service = {service}",
                f"Region = {self.region}",
                f"URL = {self.server.url}",
                f"SigningRegion = {self.region}",
            ]
        return ("\n".join(lines) + "\n").encode()

    @staticmethod
    def credentials_file() -> str:
        """A shared credentials file's text with moto's test keys (profile `default`), for a
        CCM in another process: write it to its `$HOME/.aws/credentials` (or point
        `AWS_SHARED_CREDENTIALS_FILE` at it)."""
        return (
            "[default]\n"
            f"aws_access_key_id = {TEST_CREDENTIALS.access_key_id}\n"
            f"aws_secret_access_key = {TEST_CREDENTIALS.secret_access_key}\n"
        )

    def environ(self) -> dict[str, str]:
        """Environment variables with moto's test keys (no IMDS: it is not EC2)."""
        return {
            "AWS_ACCESS_KEY_ID": TEST_CREDENTIALS.access_key_id,
            "AWS_SECRET_ACCESS_KEY": TEST_CREDENTIALS.secret_access_key,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    @staticmethod
    def node_manifest(
        instance: Instance,
        *,
        name: str | None = None,
        provider_id: bool = False,
        ready: bool = True,
        pod_cidr: str | None = None,
    ) -> dict[str, Any]:
        """The Node a kubelet `--cloud-provider=external` registers on `instance`: named by
        its private DNS name (or `name`), tainted uninitialized, with its own addresses."""
        node_name = name or instance.private_dns_name
        spec: dict[str, Any] = {"taints": [dict(UNINITIALIZED_TAINT)]}
        if provider_id:
            spec["providerID"] = instance.provider_id
        if pod_cidr:
            spec["podCIDR"] = pod_cidr
            spec["podCIDRs"] = [pod_cidr]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name, "labels": {"kubernetes.io/hostname": node_name}},
            "spec": spec,
            "status": {
                "conditions": [ready_condition(ready)],
                "addresses": [{"type": "Hostname", "address": node_name}],
            },
        }


@dataclass(frozen=True)
class Balancing:
    """What moto holds of load balancers and security groups (boto3's dicts, trimmed)."""

    nlbs: dict[str, dict[str, Any]]
    clbs: dict[str, dict[str, Any]]
    target_groups: dict[str, dict[str, Any]]
    security_groups: dict[str, dict[str, Any]]

    @property
    def empty(self) -> bool:
        """No load balancer, target group, or security group made for a Service is left
        (the world's own Nodes' group stays; rules made for load balancers do not)."""
        return not (self.nlbs or self.clbs or self.target_groups) and all(
            not g["ingress"] for g in self.security_groups.values()
        )


def _rules(permissions: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    rules = []
    for perm in permissions:
        ports = (perm.get("FromPort", -1), perm.get("ToPort", -1))
        for r in perm.get("IpRanges", []):
            rules.append((perm["IpProtocol"], *ports, r["CidrIp"], r.get("Description", "")))
        for p in perm.get("UserIdGroupPairs", []):
            rules.append((perm["IpProtocol"], *ports, p["GroupId"], p.get("Description", "")))
    return sorted(rules)


def _read_balancing(world: World) -> Balancing:
    v2, elb, ec2 = world.client("elbv2"), world.client("elb"), world.client("ec2")
    nlbs: dict[str, dict[str, Any]] = {}
    for lb in v2.describe_load_balancers()["LoadBalancers"]:
        arn = lb["LoadBalancerArn"]
        listeners = v2.describe_listeners(LoadBalancerArn=arn)["Listeners"]
        attributes = v2.describe_load_balancer_attributes(LoadBalancerArn=arn)["Attributes"]
        tags = v2.describe_tags(ResourceArns=[arn])["TagDescriptions"][0]["Tags"]
        nlbs[lb["LoadBalancerName"]] = {
            "arn": arn,
            "dns": lb["DNSName"],
            "scheme": lb["Scheme"],
            "subnets": sorted(z["SubnetId"] for z in lb["AvailabilityZones"]),
            "listeners": sorted(
                (
                    listener["Port"],
                    listener["Protocol"],
                    listener["DefaultActions"][0]["TargetGroupArn"].split("/")[1],
                    (listener.get("Certificates") or [{}])[0].get("CertificateArn", ""),
                )
                for listener in listeners
            ),
            "attributes": {a["Key"]: a["Value"] for a in attributes},
            "tags": {t["Key"]: t["Value"] for t in tags},
            "raw": lb,
        }
    groups: dict[str, dict[str, Any]] = {}
    for tg in v2.describe_target_groups()["TargetGroups"]:
        arn = tg["TargetGroupArn"]
        health = v2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
        tags = v2.describe_tags(ResourceArns=[arn])["TagDescriptions"][0]["Tags"]
        groups[tg["TargetGroupName"]] = {
            **{k: v for k, v in tg.items() if k != "LoadBalancerArns"},
            "targets": sorted(h["Target"]["Id"] for h in health),
            "tags": {t["Key"]: t["Value"] for t in tags},
        }
    clbs: dict[str, dict[str, Any]] = {}
    for lb in elb.describe_load_balancers()["LoadBalancerDescriptions"]:
        name = lb["LoadBalancerName"]
        tags = elb.describe_tags(LoadBalancerNames=[name])["TagDescriptions"][0]["Tags"]
        clbs[name] = {
            "dns": lb["DNSName"],
            "scheme": lb["Scheme"],
            "listeners": sorted(
                (
                    d["Listener"]["Protocol"],
                    d["Listener"]["LoadBalancerPort"],
                    d["Listener"]["InstanceProtocol"],
                    d["Listener"]["InstancePort"],
                )
                for d in lb["ListenerDescriptions"]
            ),
            "instances": sorted(i["InstanceId"] for i in lb["Instances"]),
            "security_groups": lb["SecurityGroups"],
            "health_check": lb.get("HealthCheck"),
            "attributes": elb.describe_load_balancer_attributes(LoadBalancerName=name)[
                "LoadBalancerAttributes"
            ],
            "tags": {t["Key"]: t["Value"] for t in tags},
            "raw": lb,
        }
    security: dict[str, dict[str, Any]] = {}
    for group in ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}]
    )["SecurityGroups"]:
        if group["GroupName"] == "default":
            continue
        security[group["GroupName"]] = {
            "id": group["GroupId"],
            "tags": {t["Key"]: t["Value"] for t in group.get("Tags", [])},
            "ingress": _rules(group["IpPermissions"]),
        }
    return Balancing(nlbs, clbs, groups, security)


_GONE_MIDWAY: Final = frozenset(
    {"LoadBalancerNotFound", "TargetGroupNotFound", "ListenerNotFound", "InvalidGroup.NotFound"}
)
_READS: Final = 5


def _gone_midway(exc: Exception) -> bool:
    """A resource listed a moment ago was deleted before its details were read (by the CCM
    under test): moto answers not-found, or a 500 when the delete lands inside its read."""
    if isinstance(exc, botocore.exceptions.ClientError):
        return exc.response.get("Error", {}).get("Code") in _GONE_MIDWAY
    return isinstance(exc, botocore.parsers.ResponseParserError) and "500" in str(exc)


async def balancing(world: World) -> Balancing:
    """moto's load balancers, target groups and security groups, read now: read again
    (up to 5 times) when one of them was deleted between its listing and its details, so
    that what is returned is one consistent snapshot."""
    for attempt in range(_READS):
        try:
            return await trio.to_thread.run_sync(_read_balancing, world)
        except Exception as exc:
            if attempt == _READS - 1 or not _gone_midway(exc):
                raise
    raise AssertionError("unreachable")


async def certificate(world: World, domain: str = "example.com") -> str:
    """A certificate ARN moto's ELB accepts (an ACM request)."""

    def request() -> str:
        arn: str = world.client("acm").request_certificate(DomainName=domain)["CertificateArn"]
        return arn

    return await trio.to_thread.run_sync(request)
