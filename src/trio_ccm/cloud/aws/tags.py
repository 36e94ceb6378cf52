"""Cluster tags: which AWS resources belong to this cluster (cloud-provider-aws's tagging).

A resource belongs to cluster `<id>` when it carries `kubernetes.io/cluster/<id>` (value
`owned`: the cluster made it and may delete it; `shared`: it only uses it) or the legacy
`KubernetesCluster=<id>`, which is recognised whatever the configured form. The cluster ID
comes from the cloud-config (`KubernetesClusterTag` is the legacy form, and wins, as
upstream) or, when the file names none, from the tags of the instance the CCM runs on.
Without a cluster ID every resource counts as the cluster's (upstream's rule); the
provider refuses that case at initialisation (see `context.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from trio_ccm.errors import ConfigError

__all__ = [
    "CLUSTER_TAG_PREFIX",
    "LEGACY_CLUSTER_TAG",
    "OWNED",
    "SERVICE_NAME_TAG",
    "SERVICE_UID_TAG",
    "SHARED",
    "ClusterTagging",
    "service_tags",
    "tags_of",
]

CLUSTER_TAG_PREFIX: Final = "kubernetes.io/cluster/"
LEGACY_CLUSTER_TAG: Final = "KubernetesCluster"
OWNED: Final = "owned"
SHARED: Final = "shared"


@dataclass(frozen=True, slots=True)
class ClusterTagging:
    """The cluster's ID and whether it uses the legacy tag."""

    cluster_id: str
    legacy: bool = False

    @classmethod
    def from_tags(cls, tags: Mapping[str, str], *, where: str) -> ClusterTagging:
        """The cluster ID an instance's tags name; ConfigError when none or several."""
        new = [k.removeprefix(CLUSTER_TAG_PREFIX) for k in tags if k.startswith(CLUSTER_TAG_PREFIX)]
        legacy = tags.get(LEGACY_CLUSTER_TAG, "")
        if len(new) > 1:
            raise ConfigError(
                f"{where} carries several cluster tags ({', '.join(sorted(new))}); set "
                "KubernetesClusterID in the cloud-config's [Global] to choose"
            )
        if legacy and new and legacy != new[0]:
            raise ConfigError(
                f"{where}: its tags {LEGACY_CLUSTER_TAG}={legacy} and "
                f"{CLUSTER_TAG_PREFIX}{new[0]} name different clusters; set "
                "KubernetesClusterID in the cloud-config's [Global]"
            )
        if legacy:
            return cls(legacy, legacy=True)
        if new:
            return cls(new[0])
        raise ConfigError(
            f"{where} has no cluster tag ({CLUSTER_TAG_PREFIX}<id> or {LEGACY_CLUSTER_TAG}); set "
            "KubernetesClusterID in the cloud-config's [Global], or tag the instance"
        )

    @property
    def key(self) -> str:
        """The cluster tag's key: `kubernetes.io/cluster/<id>`."""
        return CLUSTER_TAG_PREFIX + self.cluster_id

    def has_cluster_tag(self, tags: Mapping[str, str]) -> bool:
        """Whether a resource with `tags` belongs to the cluster (owned or shared)."""
        if not self.cluster_id:
            return True
        return self.key in tags or tags.get(LEGACY_CLUSTER_TAG) == self.cluster_id

    def owned(self, tags: Mapping[str, str]) -> bool:
        """Whether the cluster owns a resource with `tags` (and may delete it)."""
        if not self.cluster_id:
            return False
        return tags.get(self.key) == OWNED or tags.get(LEGACY_CLUSTER_TAG) == self.cluster_id

    def owned_tags(self) -> dict[str, str]:
        """The tags a resource the cluster creates carries."""
        if self.legacy:
            return {LEGACY_CLUSTER_TAG: self.cluster_id, self.key: OWNED}
        return {self.key: OWNED}

    def tag_key_filter(self) -> dict[str, list[str]]:
        """An EC2 `tag-key` filter that keeps a superset of the cluster's resources (the
        exact rule, `has_cluster_tag`, is applied to what it returns)."""
        return {"tag-key": [self.key, LEGACY_CLUSTER_TAG]} if self.cluster_id else {}


def tags_of(items: object) -> dict[str, str]:
    """An EC2 `Tags` list (`[{"Key": k, "Value": v}]`) as a dict."""
    tags: dict[str, str] = {}
    if isinstance(items, list):
        for item in items:
            if isinstance(item, Mapping) and "Key" in item:
                tags[str(item["Key"])] = str(item.get("Value") or "")
    return tags


SERVICE_NAME_TAG: Final = "kubernetes.io/service-name"
"""Upstream's tag on everything made for a Service: `<namespace>/<name>`."""
SERVICE_UID_TAG: Final = "trio-ccm.dev/service-uid"
"""Ours, beside it: the Service's UID, so a leak sweep tells a recreated Service's load
balancer from the live one's without trusting the name alone."""


def service_tags(
    tagging: ClusterTagging, service: str, uid: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The tags of a resource made for a Service: the user's extra tags, then the Service's
    and the cluster's (which the extra tags cannot override)."""
    tags = dict(extra or {})
    tags[SERVICE_NAME_TAG] = service
    if uid:
        tags[SERVICE_UID_TAG] = uid
    tags.update(tagging.owned_tags())
    return tags
