"""The cloud-config file in cloud-provider-aws's format, so an existing file works unchanged.

It is a gcfg ("git config") INI file: a `[Global]` section and `[ServiceOverride "N"]`
sections; section and key names are case-insensitive; `;` and `#` start comments; a value
may be double-quoted (escapes `\\"`, `\\\\`, `\\n`, `\\t`) and continued with a trailing
backslash; a bool key written alone means true; a repeated key overrides, except
`NodeIPFamilies`, which appends (and is emptied by a bare `NodeIPFamilies` line).

The `[Global]` keys, as cloud-provider-aws's `CloudConfig` (pkg/providers/v1/config):

| key | meaning | default |
| --- | --- | --- |
| Zone | an availability zone; its region is the provider's region (deprecated form) | |
| Region | the AWS region | `AWS_REGION`, `AWS_DEFAULT_REGION`, IMDS |
| VPC | the cluster's VPC (with SubnetID or RoleARN, the CCM may run off the VPC) | IMDS |
| SubnetID | a subnet for load balancers | |
| RouteTableID | the route table for pod routes | the one with the cluster tag |
| RoleARN | an IAM role to assume for every call | |
| SourceARN | `x-amz-source-arn` of the AssumeRole call | |
| KubernetesClusterTag | the legacy cluster ID (`KubernetesCluster=<id>` tags) | |
| KubernetesClusterID | the cluster ID (`kubernetes.io/cluster/<id>` tags) | this instance's tag |
| DisableSecurityGroupIngress | do not add load-balancer rules to node security groups | false |
| ElbSecurityGroup | one security group for every Classic ELB | |
| NodeIPFamilies | `ipv4`, `ipv6`, in the order they appear on Nodes (repeatable) | ipv4 |
| ClusterServiceLoadBalancerHealthProbeMode | `ServiceNodePort` or `Shared` | ServiceNodePort |
| ClusterServiceSharedLoadBalancerHealthProbePort | the Shared mode's port | 10256 |
| ClusterServiceSharedLoadBalancerHealthProbePath | the Shared mode's path | /healthz |
| SupportedTopologyInstanceTypePattern | types expected to have topology labels | upstream's |
| NLBSecurityGroupMode | `Managed`: NLBs get their own security group | |

`[ServiceOverride "N"]` keys: `Service`, `Region`, `URL`, `SigningRegion` (all required, as
upstream), `SigningName`, `SigningMethod`; one override per (service, region). Service
names are matched case-insensitively against both the SDK v2 IDs upstream compares with
today (`EC2`, `Elastic Load Balancing`, `Elastic Load Balancing v2`, `STS`, `ec2imds`) and
the SDK v1 endpoint IDs older files use (`ec2`, `elasticloadbalancing` for both ELB APIs,
`sts`); others (`s3`, `kms`, ...) are accepted and unused.

Differences from upstream, on purpose: an unknown section or key, or a value that cannot
mean anything (a bool that is not a bool, an ARN that is not one, `NodeIPFamilies=ipv5`),
is an error naming the line, the key and the fix, where upstream's reader ignores unknown
keys and its code ignores unknown families. `DisableStrictZoneCheck`, removed upstream, is
accepted without effect (with a warning), so files written for the in-tree provider work.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from trio_ccm.cloud.gcfg import BOOLS as _BOOLS
from trio_ccm.cloud.gcfg import assignment as _assignment
from trio_ccm.cloud.gcfg import logical_lines as _logical_lines
from trio_ccm.cloud.gcfg import value as _value
from trio_ccm.errors import ConfigError

__all__ = [
    "DEFAULT_SHARED_HEALTH_PROBE_PATH",
    "DEFAULT_SHARED_HEALTH_PROBE_PORT",
    "CloudConfig",
    "ServiceOverride",
    "parse_cloud_config",
    "region_of_zone",
]

DEFAULT_SHARED_HEALTH_PROBE_PORT: Final = 10256
DEFAULT_SHARED_HEALTH_PROBE_PATH: Final = "/healthz"

# Service names an override may give, by the client's own service names.
SERVICE_ALIASES: Final[Mapping[str, frozenset[str]]] = {
    "ec2": frozenset({"ec2"}),
    "elasticloadbalancing": frozenset({"elb", "elbv2"}),  # SDK v1: both ELB APIs
    "elastic load balancing": frozenset({"elb"}),
    "elastic load balancing v2": frozenset({"elbv2"}),
    "elasticloadbalancingv2": frozenset({"elbv2"}),
    "sts": frozenset({"sts"}),
    "ec2imds": frozenset({"imds"}),
}

_ZONE_REGION: Final = re.compile(r"^([a-zA-Z]+-)+\d+")  # upstream's azToRegion
_REGION: Final = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_ARN: Final = re.compile(r"^arn:[a-z0-9-]+:[a-z0-9-]+:[a-z0-9-]*:\d*:.+$")
_ROLE_ARN: Final = re.compile(r"^arn:[a-z0-9-]+:iam::\d{12}:role/.+$")
_SECTION: Final = re.compile(
    r'^\[\s*([A-Za-z][A-Za-z0-9-.]*)\s*(?:"((?:[^"\\]|\\.)*)")?\s*\]\s*(?:[;#].*)?$'
)


def region_of_zone(zone: str) -> str:
    """The region of an availability zone (`us-east-1a` → `us-east-1`), "" when none."""
    found = _ZONE_REGION.match(zone)
    return found.group(0) if found else ""


@dataclass(frozen=True, slots=True)
class ServiceOverride:
    """One `[ServiceOverride "N"]` section."""

    name: str
    service: str
    region: str
    url: str
    signing_region: str
    signing_name: str = ""
    signing_method: str = ""

    def applies_to(self, service: str, region: str) -> bool:
        """Whether it overrides client service `service` (ec2, elb, elbv2, sts, imds)."""
        services = SERVICE_ALIASES.get(self.service.lower(), frozenset())
        return service in services and (service == "imds" or self.region == region)


@dataclass(frozen=True, slots=True)
class CloudConfig:
    """The parsed cloud-config (see the module docstring for each key)."""

    zone: str = ""
    region: str = ""
    vpc: str = ""
    subnet_id: str = ""
    route_table_id: str = ""
    role_arn: str = ""
    source_arn: str = ""
    kubernetes_cluster_tag: str = ""
    kubernetes_cluster_id: str = ""
    disable_security_group_ingress: bool = False
    elb_security_group: str = ""
    node_ip_families: tuple[str, ...] = ("ipv4",)
    cluster_service_load_balancer_health_probe_mode: str = ""
    cluster_service_shared_load_balancer_health_probe_port: int = DEFAULT_SHARED_HEALTH_PROBE_PORT
    cluster_service_shared_load_balancer_health_probe_path: str = DEFAULT_SHARED_HEALTH_PROBE_PATH
    supported_topology_instance_type_pattern: str = ""
    nlb_security_group_mode: str = ""
    service_overrides: tuple[ServiceOverride, ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)
    """Things accepted without effect (deprecated keys), for the provider to log."""

    @property
    def configured_region(self) -> str:
        """The region the file sets (Zone wins, as upstream), "" when it sets none."""
        if self.zone:
            return region_of_zone(self.zone)
        return self.region

    @property
    def cluster_id(self) -> str:
        """The cluster ID the file sets (legacy tag or new), "" when it sets none."""
        return self.kubernetes_cluster_tag or self.kubernetes_cluster_id

    def override_for(self, service: str, region: str) -> ServiceOverride | None:
        """The override of client service `service` in `region`, if any."""
        return next((o for o in self.service_overrides if o.applies_to(service, region)), None)


# -- the keys ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Key:
    name: str  # as documented (for messages)
    attr: str
    kind: str  # "str", "bool", "int", "multi"
    check: Callable[[str], str | None] | None = None  # problem with a value, or None


def _prefixed(prefix: str, what: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value and not re.fullmatch(rf"{prefix}-[0-9a-z]+", value):
            return f"must be {what} ID ({prefix}-...), e.g. {prefix}-0123456789abcdef0"
        return None

    return check


def _zone(value: str) -> str | None:
    if value and not region_of_zone(value):
        return "must be an availability zone name such as us-east-1a"
    return None


def _region(value: str) -> str | None:
    if value and not _REGION.match(value):
        return "must be a region name such as us-east-1"
    return None


def _role_arn(value: str) -> str | None:
    if value and not _ROLE_ARN.match(value):
        return "must be an IAM role ARN such as arn:aws:iam::123456789012:role/ccm"
    return None


def _arn(value: str) -> str | None:
    if value and not _ARN.match(value):
        return "must be an ARN (arn:partition:service:region:account:resource)"
    return None


def _family(value: str) -> str | None:
    if value not in ("ipv4", "ipv6"):
        return "must be ipv4 or ipv6 (repeat the key for both, in the order Nodes list them)"
    return None


def _probe_mode(value: str) -> str | None:
    if value not in ("", "Shared", "ServiceNodePort"):
        return "must be Shared or ServiceNodePort"
    return None


def _port(value: str) -> str | None:
    number = int(value)
    if not 0 <= number <= 65535:
        return "must be a port number from 1 to 65535 (0: the default, 10256)"
    return None


def _path(value: str) -> str | None:
    if value and not value.startswith("/"):
        return "must be an HTTP path starting with /, e.g. /healthz"
    return None


def _pattern(value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as exc:
        return f"must be a regular expression ({exc})"
    return None


def _nlb_sg_mode(value: str) -> str | None:
    if value not in ("", "Managed"):
        return "must be Managed (or empty)"
    return None


_GLOBAL: Final = {
    key.name.lower(): key
    for key in (
        _Key("Zone", "zone", "str", _zone),
        _Key("Region", "region", "str", _region),
        _Key("VPC", "vpc", "str", _prefixed("vpc", "a VPC")),
        _Key("SubnetID", "subnet_id", "str", _prefixed("subnet", "a subnet")),
        _Key("RouteTableID", "route_table_id", "str", _prefixed("rtb", "a route table")),
        _Key("RoleARN", "role_arn", "str", _role_arn),
        _Key("SourceARN", "source_arn", "str", _arn),
        _Key("KubernetesClusterTag", "kubernetes_cluster_tag", "str"),
        _Key("KubernetesClusterID", "kubernetes_cluster_id", "str"),
        _Key("DisableSecurityGroupIngress", "disable_security_group_ingress", "bool"),
        _Key("ElbSecurityGroup", "elb_security_group", "str", _prefixed("sg", "a security group")),
        _Key("NodeIPFamilies", "node_ip_families", "multi", _family),
        _Key(
            "ClusterServiceLoadBalancerHealthProbeMode",
            "cluster_service_load_balancer_health_probe_mode",
            "str",
            _probe_mode,
        ),
        _Key(
            "ClusterServiceSharedLoadBalancerHealthProbePort",
            "cluster_service_shared_load_balancer_health_probe_port",
            "int",
            _port,
        ),
        _Key(
            "ClusterServiceSharedLoadBalancerHealthProbePath",
            "cluster_service_shared_load_balancer_health_probe_path",
            "str",
            _path,
        ),
        _Key(
            "SupportedTopologyInstanceTypePattern",
            "supported_topology_instance_type_pattern",
            "str",
            _pattern,
        ),
        _Key("NLBSecurityGroupMode", "nlb_security_group_mode", "str", _nlb_sg_mode),
    )
}
_DEPRECATED: Final = {
    "disablestrictzonecheck": "DisableStrictZoneCheck was removed from cloud-provider-aws "
    "(zones are no longer checked); it has no effect, delete it",
}
_OVERRIDE: Final = {
    name.lower(): name
    for name in ("Service", "Region", "URL", "SigningRegion", "SigningName", "SigningMethod")
}


def parse_cloud_config(data: bytes | str, *, source: str = "cloud-config") -> CloudConfig:
    """The CloudConfig in `data`; ConfigError naming `source`, the line, the key and the fix."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source}: not UTF-8 text ({exc}); save the file as UTF-8") from exc
    else:
        text = data
    text = text.removeprefix("\ufeff")
    values: dict[str, object] = {}
    families: list[str] | None = None
    overrides: dict[str, dict[str, str]] = {}
    override_lines: dict[str, int] = {}
    warnings: list[str] = []
    section: str | None = None  # "global", or the override's name
    for line in _logical_lines(text):
        where = f"{source} line {line.number}"
        stripped = line.text.strip()
        if not stripped or stripped[0] in ";#":
            continue
        if stripped.startswith("["):
            section = _section(stripped, where, overrides, override_lines, line.number)
            continue
        if section is None:
            raise ConfigError(
                f"{where}: {stripped!r} comes before any section; put it under [Global]"
            )
        name, has_value, raw = _assignment(stripped, where)
        if section == "global":
            families = _global(name, has_value, raw, where, values, families, warnings)
        else:
            _override_key(name, has_value, raw, where, overrides[section], section)
    config = CloudConfig(**values)  # type: ignore[arg-type]  # keys checked against _GLOBAL
    if families is not None:
        if not families:
            raise ConfigError(
                f"{source}: [Global] NodeIPFamilies is emptied and never set again; set "
                "ipv4 and/or ipv6, or delete the key (default ipv4)"
            )
        if len(set(families)) != len(families):
            raise ConfigError(
                f"{source}: [Global] NodeIPFamilies lists a family twice ({', '.join(families)}); "
                "list each once"
            )
        config = replace(config, node_ip_families=tuple(families))
    _check_global(config, source)
    built = tuple(
        _build_override(name, keys, f"{source} line {override_lines[name]}")
        for name, keys in overrides.items()
    )
    seen: dict[tuple[str, str], str] = {}
    for override in built:
        signature = (override.service.lower(), override.region)
        if signature in seen:
            raise ConfigError(
                f'{source}: [ServiceOverride "{override.name}"] overrides {override.service} '
                f'in {override.region} again (already in [ServiceOverride "{seen[signature]}"]); '
                "keep one"
            )
        seen[signature] = override.name
    return replace(config, service_overrides=built, warnings=tuple(warnings))


def _section(
    text: str,
    where: str,
    overrides: dict[str, dict[str, str]],
    override_lines: dict[str, int],
    number: int,
) -> str:
    found = _SECTION.match(text)
    if found is None:
        raise ConfigError(
            f'{where}: {text!r} is no section header; write [Global] or [ServiceOverride "1"]'
        )
    name, sub = found.group(1).lower(), found.group(2)
    if name == "global" and sub is None:
        return "global"
    if name == "serviceoverride" and sub:
        sub = _value(f'"{sub}"', where)
        overrides.setdefault(sub, {})
        override_lines.setdefault(sub, number)
        return sub
    if name == "serviceoverride":
        raise ConfigError(f'{where}: [ServiceOverride] needs a name, e.g. [ServiceOverride "1"]')
    raise ConfigError(
        f"{where}: unknown section [{found.group(1)}]; the sections are [Global] and "
        '[ServiceOverride "N"] (cloud-provider-aws\'s format)'
    )


def _global(
    name: str,
    has_value: bool,
    raw: str,
    where: str,
    values: dict[str, object],
    families: list[str] | None,
    warnings: list[str],
) -> list[str] | None:
    lowered = name.lower()
    if lowered in _DEPRECATED:
        warnings.append(f"{where}: {_DEPRECATED[lowered]}")
        return families
    key = _GLOBAL.get(lowered)
    if key is None:
        known = ", ".join(k.name for k in _GLOBAL.values())
        raise ConfigError(
            f"{where}: [Global] has no key {name!r}; check the spelling (the keys: {known})"
        )
    where = f"{where}: [Global] {key.name}"
    if key.kind == "multi":
        if not has_value:
            return []  # a bare multi-valued key empties it (gcfg)
        value = _value(raw, where)
        _check(key, value, where)
        return [*(families or []), value]
    if key.kind == "bool":
        if not has_value:
            values[key.attr] = True
            return families
        value = _value(raw, where)
        parsed = _BOOLS.get(value.lower())
        if parsed is None:
            raise ConfigError(f"{where}: {value!r} is not a bool; write true or false")
        values[key.attr] = parsed
        return families
    if not has_value:
        raise ConfigError(f"{where}: the key has no value; write {key.name} = VALUE")
    value = _value(raw, where)
    if key.kind == "int":
        try:
            number = int(value, 16) if value.lower().startswith("0x") else int(value, 10)
        except ValueError:
            raise ConfigError(f"{where}: {value!r} is not a whole number") from None
        _check(key, str(number), where)
        values[key.attr] = number or DEFAULT_SHARED_HEALTH_PROBE_PORT
        return families
    _check(key, value, where)
    values[key.attr] = value
    return families


def _check(key: _Key, value: str, where: str) -> None:
    problem = key.check(value) if key.check is not None else None
    if problem:
        raise ConfigError(f"{where} = {value!r}: {problem}")


def _override_key(
    name: str, has_value: bool, raw: str, where: str, keys: dict[str, str], section: str
) -> None:
    canonical = _OVERRIDE.get(name.lower())
    if canonical is None:
        raise ConfigError(
            f'{where}: [ServiceOverride "{section}"] has no key {name!r}; the keys are '
            f"{', '.join(_OVERRIDE.values())}"
        )
    if not has_value:
        raise ConfigError(
            f'{where}: [ServiceOverride "{section}"] {canonical} has no value; write '
            f"{canonical} = VALUE"
        )
    keys[canonical] = _value(raw, f'{where}: [ServiceOverride "{section}"] {canonical}').strip()


def _build_override(name: str, keys: Mapping[str, str], where: str) -> ServiceOverride:
    for required in ("Service", "Region", "URL", "SigningRegion"):
        if not keys.get(required):
            raise ConfigError(
                f'{where}: [ServiceOverride "{name}"] {required} is missing or empty; every '
                "override needs Service, Region, URL and SigningRegion (as upstream)"
            )
    url = keys["URL"]
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(
            f'{where}: [ServiceOverride "{name}"] URL = {url!r} must be an http:// or https:// '
            "URL, e.g. https://ec2.us-east-1.amazonaws.com"
        )
    problem = _region(keys["Region"]) or _region(keys["SigningRegion"])
    if problem:
        raise ConfigError(f'{where}: [ServiceOverride "{name}"] Region/SigningRegion {problem}')
    return ServiceOverride(
        name=name,
        service=keys["Service"],
        region=keys["Region"],
        url=url.rstrip("/"),
        signing_region=keys["SigningRegion"],
        signing_name=keys.get("SigningName", ""),
        signing_method=keys.get("SigningMethod", ""),
    )


def _check_global(config: CloudConfig, source: str) -> None:
    tag, cluster_id = config.kubernetes_cluster_tag, config.kubernetes_cluster_id
    if tag and cluster_id and tag != cluster_id:
        raise ConfigError(
            f"{source}: [Global] KubernetesClusterTag = {tag!r} and KubernetesClusterID = "
            f"{cluster_id!r} differ; they name the same cluster: set one (as upstream)"
        )
    if config.zone and config.region and region_of_zone(config.zone) != config.region:
        raise ConfigError(
            f"{source}: [Global] Zone = {config.zone!r} is not in Region = {config.region!r}; "
            "Zone wins upstream (deprecated): delete Zone"
        )
