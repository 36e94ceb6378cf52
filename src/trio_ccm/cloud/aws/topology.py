"""The `topology.k8s.aws/network-node-layer-N` labels: where an instance sits in AWS's
network (DescribeInstanceTopology), as cloud-provider-aws sets them on Nodes.

- **Who is asked**: an instance whose Node has no `...-layer-1` label yet (so the address
  sync asks nothing once a Node is labelled), and whose region, instance type and ID are
  not known to have no topology. IDs go 100 per call (the API's limit), so a wave of new
  Nodes costs one call per 100, where upstream asks once per Node.
- **What is remembered for a day** (upstream's cache): a region where the call is
  unsupported or not allowed (`UnsupportedOperation`, `UnauthorizedOperation`: a warning,
  then no more calls); an instance type AWS answered nothing for, unless it matches
  `SupportedTopologyInstanceTypePattern` (default upstream's
  `^(hpc|trn|p)[0-9]+[a-z]*(-[a-z0-9]+)?(\\.[0-9a-z]*)$`), in which case only that instance
  (it may be starting or stopping).
- **Failures**: the call failing otherwise (throttled, 5xx) fails the lookup when an
  instance of a supported type was asked (upstream fails that Node's initialisation), and
  is a warning, without labels, when none was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

import trio

from trio_ccm.cloud.aws.ec2 import Ec2Instance, chunks
from trio_ccm.cloud.aws.errors import AwsError
from trio_ccm.logs import get_logger

if TYPE_CHECKING:
    from trio_ccm.cloud.aws.context import AwsContext

__all__ = ["DEFAULT_PATTERN", "LABEL_PREFIX", "Topology"]

log = get_logger("trio_ccm.cloud.aws.topology")

LABEL_PREFIX: Final = "topology.k8s.aws/network-node-layer-"
DEFAULT_PATTERN: Final = r"^(hpc|trn|p)[0-9]+[a-z]*(-[a-z0-9]+)?(\.[0-9a-z]*)$"
IDS_PER_CALL: Final = 100
UNSUPPORTED_TTL_S: Final = 24 * 3600.0
_REGION_OFF: Final = frozenset({"UnsupportedOperation", "UnauthorizedOperation"})


class Topology:
    """The network-node layers of instances (see the module docstring)."""

    def __init__(self, context: AwsContext) -> None:
        self._context = context
        pattern = context.config.supported_topology_instance_type_pattern or DEFAULT_PATTERN
        self._supported = re.compile(pattern)
        self._unsupported: dict[str, float] = {}  # region, type or instance ID -> until

    def _known_without(self, key: str, now: float) -> bool:
        until = self._unsupported.get(key)
        if until is None:
            return False
        if until <= now:
            del self._unsupported[key]
            return False
        return True

    def labels(self, layers: Sequence[str]) -> dict[str, str]:
        """The labels for an instance's network nodes, layer 1 first."""
        return {f"{LABEL_PREFIX}{n}": node for n, node in enumerate(layers, start=1)}

    async def layers(self, instances: Sequence[Ec2Instance]) -> Mapping[str, tuple[str, ...]]:
        """The network nodes of each instance that has them, by instance ID."""
        now = trio.current_time()
        region = self._context.region
        if self._known_without(region, now):
            return {}
        asked = [
            i
            for i in instances
            if i.instance_type
            and not self._known_without(i.instance_type, now)
            and not self._known_without(i.id, now)
        ]
        found: dict[str, tuple[str, ...]] = {}
        for chunk in chunks(sorted({i.id for i in asked}), IDS_PER_CALL):
            try:
                answer = await self._context.client.call(
                    "ec2",
                    "DescribeInstanceTopology",
                    {"InstanceIds": list(chunk)},
                    target=f"{len(chunk)} instances",
                )
            except AwsError as exc:
                if exc.code in _REGION_OFF:
                    log.warning("aws.topology-unavailable", region=region, error=str(exc))
                    self._unsupported[region] = now + UNSUPPORTED_TTL_S
                    return found
                if any(self._supported.match(i.instance_type) for i in asked):
                    raise
                log.warning("aws.topology-failed", error=str(exc))
                return found
            items = answer.get("Instances")
            for item in items if isinstance(items, list) else ():
                if isinstance(item, Mapping) and item.get("InstanceId"):
                    nodes = item.get("NetworkNodes")
                    found[str(item["InstanceId"])] = tuple(
                        str(n) for n in (nodes if isinstance(nodes, list) else ())
                    )
        for instance in asked:
            if instance.id in found:
                continue
            if self._supported.match(instance.instance_type):
                self._unsupported[instance.id] = now + UNSUPPORTED_TTL_S
                log.warning(
                    "aws.topology-missing",
                    instance=instance.id,
                    instance_type=instance.instance_type,
                    reason="a supported type without topology: starting or stopping?",
                )
            else:
                self._unsupported[instance.instance_type] = now + UNSUPPORTED_TTL_S
        return found
