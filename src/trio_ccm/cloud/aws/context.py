"""AwsContext: what the provider's parts share (client, config, region, cluster tags, lookups)
and the one-time set-up they wait for (`ready()`).

`ready()` runs once (concurrent callers share it; a failed run is tried again by the next
caller) and settles, in this order:

1. **the region**: the cloud-config's `Zone` (its region) or `Region`, else `AWS_REGION` /
   `AWS_DEFAULT_REGION`, else the instance metadata service;
2. **the cluster ID**: the cloud-config's `KubernetesClusterTag` / `KubernetesClusterID`,
   else the cluster tag of the instance trio-ccm runs on (its ID from the metadata service,
   its tags from DescribeInstances), as upstream; none is an error naming both fixes;
3. **the zones** (DescribeAvailabilityZones): the zone-ID labels need them, and a first
   signed call shows at start-up, not at the first Node, whether the credentials and the
   IAM policy work.

`probe()` is the start-up probe every replica makes, leading or not (the provider's
`check()`): it settles the region and lists the zones, one read-only signed call. The
zones it lists are kept, so a `ready()` after it does not list them again (and a probe
after `ready()` calls nothing: AWS has just answered).

Part 2 (load balancers) adds `vpc_id()` users: the cloud-config's `VPC`, else the VPC of
the instance trio-ccm runs on.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from collections.abc import Callable, Mapping

import httpx
import trio

from trio_ccm.cloud.aws.client import AwsClient
from trio_ccm.cloud.aws.config import CloudConfig
from trio_ccm.cloud.aws.credentials import (
    AssumeRoleSource,
    CredentialChain,
    RefreshingCredentials,
    utc_now,
)
from trio_ccm.cloud.aws.ec2 import describe_by_ids
from trio_ccm.cloud.aws.errors import ImdsError
from trio_ccm.cloud.aws.imds import Imds
from trio_ccm.cloud.aws.lookup import InstanceLookup, NodeDirectory, ZoneCache
from trio_ccm.cloud.aws.tags import ClusterTagging
from trio_ccm.errors import ConfigError
from trio_ccm.logs import get_logger

__all__ = ["AwsContext"]

log = get_logger("trio_ccm.cloud.aws")


class AwsContext:
    """Shared by the provider's parts (see the module docstring)."""

    def __init__(
        self,
        config: CloudConfig,
        *,
        environ: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        now: Callable[[], dt.datetime] = utc_now,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self.client = AwsClient(config=config, transport=transport, rng=rng)
        imds_override = config.override_for("imds", "")
        self.imds = Imds(
            http=self.client.http,
            endpoint=self.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            or (imds_override.url if imds_override is not None else ""),
            disabled=self.environ.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true",
        )
        chain = RefreshingCredentials(
            CredentialChain(
                environ=self.environ,
                sts=self.client,
                http=self.client.http,
                imds=self.imds,
                now=now,
            ),
            now=now,
        )
        if config.role_arn:
            chain = RefreshingCredentials(
                AssumeRoleSource(
                    base=chain,
                    role_arn=config.role_arn,
                    source_arn=config.source_arn,
                    sts=self.client,
                    now=now,
                ),
                now=now,
            )
        self.client.credentials = chain
        self.directory = NodeDirectory()
        self.zones = ZoneCache(self.client)
        self.lookup = InstanceLookup(self.client, self.directory)
        self.region = ""
        self.tagging = ClusterTagging("")
        self._ready = False
        self._lock = trio.Lock()
        self._self_instance_vpc = ""
        self._self_subnet: str | None = None
        self._zones_listed = False

    async def probe(self) -> None:
        """Settle the region and list its zones, under the set-up's lock (see the module
        docstring); raises what AWS or the region lookup raised."""
        async with self._lock:
            await self._settle_region()
            await self._list_zones()

    async def ready(self) -> None:
        """Settle region, cluster ID and zones once (see the module docstring)."""
        if self._ready:
            return
        async with self._lock:
            if self._ready:
                return
            await self._settle_region()
            if not self.tagging.cluster_id:
                self.tagging = await self._tagging()
                self.lookup.tagging = self.tagging
            await self._list_zones()
            self._ready = True
        for warning in self.config.warnings:
            log.warning("aws.config-ignored", detail=warning)
        log.info(
            "aws.initialized",
            region=self.region,
            cluster_id=self.tagging.cluster_id,
            legacy_cluster_tag=self.tagging.legacy,
            credentials=self.client.credentials.description if self.client.credentials else None,
            overrides=[f"{o.service}={o.url}" for o in self.config.service_overrides],
        )

    async def _settle_region(self) -> None:
        if not self.region:
            self.region = await self._region()
            self.client.region = self.region

    async def _list_zones(self) -> None:
        if not self._zones_listed:
            await self.zones.fill()
            self._zones_listed = True

    async def _region(self) -> str:
        region = (
            self.config.configured_region
            or self.environ.get("AWS_REGION", "")
            or self.environ.get("AWS_DEFAULT_REGION", "")
        )
        if region:
            return region
        log.info("aws.region-from-metadata")
        try:
            region = await self.imds.region()
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"aws: no region: the cloud-config sets none ([Global] Region), nor does "
                f"AWS_REGION, and the instance metadata service could not tell ({exc})"
            ) from exc
        if not region:
            raise ConfigError(
                "aws: the instance metadata service answered an empty region; set Region in "
                "the cloud-config's [Global]"
            )
        return region

    async def _tagging(self) -> ClusterTagging:
        config = self.config
        if config.kubernetes_cluster_tag:
            return ClusterTagging(config.kubernetes_cluster_tag, legacy=True)
        if config.kubernetes_cluster_id:
            return ClusterTagging(config.kubernetes_cluster_id)
        try:
            instance_id = await self.imds.instance_id()
        except Exception as exc:
            raise ConfigError(
                "aws: no cluster ID: set KubernetesClusterID in the cloud-config's [Global] "
                "(the value of the kubernetes.io/cluster/<id> tags); off EC2 it cannot be read "
                f"from this instance's tags ({exc})"
            ) from exc
        found = await describe_by_ids(self.client, [instance_id], target="this instance")
        instance = found.get(instance_id)
        if instance is None:
            raise ConfigError(
                f"aws: this instance ({instance_id}, from the metadata service) is unknown to "
                f"EC2 in {self.region}; set KubernetesClusterID and Region in the cloud-config"
            )
        self._self_instance_vpc = instance.vpc_id
        return ClusterTagging.from_tags(instance.tags, where=f"this instance ({instance_id})")

    async def vpc_id(self) -> str:
        """The cluster's VPC: the cloud-config's `VPC`, else this instance's."""
        await self.ready()
        if self.config.vpc:
            return self.config.vpc
        if not self._self_instance_vpc:
            instance_id = await self.imds.instance_id()
            found = await describe_by_ids(self.client, [instance_id], target="this instance")
            instance = found.get(instance_id)
            if instance is None or not instance.vpc_id:
                raise ConfigError(
                    f"aws: the VPC of this instance ({instance_id}) is unknown; set VPC in the "
                    "cloud-config's [Global]"
                )
            self._self_instance_vpc = instance.vpc_id
        return self._self_instance_vpc

    async def own_subnet(self) -> str:
        """This instance's subnet, upstream's fallback when no subnet of the VPC may be the
        cluster's ("" off EC2, or when the metadata service is off or unreachable)."""
        if self._self_subnet is None:
            try:
                instance_id = await self.imds.instance_id()
            except ImdsError as exc:
                log.info("aws.own-subnet-unknown", reason=str(exc))
                self._self_subnet = ""
                return ""
            found = await describe_by_ids(self.client, [instance_id], target="this instance")
            instance = found.get(instance_id)
            self._self_subnet = instance.subnet_id if instance is not None else ""
        return self._self_subnet

    async def aclose(self) -> None:
        await self.client.aclose()
