"""What a Service asks of its Octavia load balancer: OCCM's `[LoadBalancer]` keys,
`[LoadBalancerClass "x"]` sections and `loadbalancer.openstack.org/*` annotations read into
an `LbPlan`, with no cloud call.

`LbOptions.parse()` reads the raw config sections (a bad value is a `ConfigError` naming the
key and the fix). `plan()` is pure: the Service, the options and the cluster name in, the
plan out, or `ServiceRefused` naming the annotation and the fix for a value that cannot mean
anything (OCCM falls back to the default in silence; a drop-in that guessed would build a
load balancer nobody asked for).

Precedence is OCCM's (openstack-ccm-study §3): the floating network is class > annotation >
config; the VIP and member subnets are annotation > class > config, except that at creation
an external Service's class `subnet-id` / `network-id` win over the annotation (OCCM's
`createOctaviaLoadBalancer`). A key present with the value `""` is set (to nothing).
Booleans are the literal strings `"true"` / `"false"`.

Names are OCCM's: the load balancer `kube_service_<cluster>_<namespace>_<name>` (cut at 255
bytes), the legacy `a<uid>` looked up too, children `listener_<i>_<lb>`, `pool_<i>_<lb>`,
`monitor_<i>_<lb>` with `i` the index in `spec.ports`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from trio_ccm.cloud.openstack.config import CloudConfig, parse_duration_s
from trio_ccm.cloud.provider import NodeInfo, ServiceInfo, ServiceRefused
from trio_ccm.errors import ConfigError

__all__ = [
    "ANNOTATIONS",
    "CONFIG_KEYS",
    "DEFAULT_MAX_CREATES_IN_FLIGHT",
    "DEFAULT_MAX_WRITES_IN_FLIGHT",
    "OUR_KEYS",
    "LbOptions",
    "LbPlan",
    "Member",
    "MonitorPlan",
    "PortPlan",
    "lb_name",
    "members",
    "plan",
]

PREFIX: Final = "loadbalancer.openstack.org/"
INTERNAL: Final = "service.beta.kubernetes.io/openstack-internal-load-balancer"
SOURCE_RANGES: Final = "service.beta.kubernetes.io/load-balancer-source-ranges"
CLASS: Final = PREFIX + "class"
FLOATING_NETWORK_ID: Final = PREFIX + "floating-network-id"
FLOATING_SUBNET_ID: Final = PREFIX + "floating-subnet-id"
FLOATING_SUBNET: Final = PREFIX + "floating-subnet"
FLOATING_SUBNET_TAGS: Final = PREFIX + "floating-subnet-tags"
SUBNET_ID: Final = PREFIX + "subnet-id"
NETWORK_ID: Final = PREFIX + "network-id"
MEMBER_SUBNET_ID: Final = PREFIX + "member-subnet-id"
PORT_ID: Final = PREFIX + "port-id"
KEEP_FLOATINGIP: Final = PREFIX + "keep-floatingip"
CONNECTION_LIMIT: Final = PREFIX + "connection-limit"
LB_METHOD: Final = PREFIX + "lb-method"
PROXY_PROTOCOL: Final = PREFIX + "proxy-protocol"
X_FORWARDED_FOR: Final = PREFIX + "x-forwarded-for"
TLS_CONTAINER_REF: Final = PREFIX + "default-tls-container-ref"
TIMEOUT_CLIENT_DATA: Final = PREFIX + "timeout-client-data"
TIMEOUT_MEMBER_CONNECT: Final = PREFIX + "timeout-member-connect"
TIMEOUT_MEMBER_DATA: Final = PREFIX + "timeout-member-data"
TIMEOUT_TCP_INSPECT: Final = PREFIX + "timeout-tcp-inspect"
FLAVOR_ID: Final = PREFIX + "flavor-id"
AVAILABILITY_ZONE: Final = PREFIX + "availability-zone"
ENABLE_HEALTH_MONITOR: Final = PREFIX + "enable-health-monitor"
HM_DELAY: Final = PREFIX + "health-monitor-delay"
HM_TIMEOUT: Final = PREFIX + "health-monitor-timeout"
HM_MAX_RETRIES: Final = PREFIX + "health-monitor-max-retries"
HM_MAX_RETRIES_DOWN: Final = PREFIX + "health-monitor-max-retries-down"
NODE_SELECTOR: Final = PREFIX + "node-selector"
HOSTNAME: Final = PREFIX + "hostname"
LB_ADDRESS: Final = PREFIX + "load-balancer-address"
LB_ID: Final = PREFIX + "load-balancer-id"

ANNOTATIONS: Final = (
    INTERNAL,
    CLASS,
    FLOATING_NETWORK_ID,
    FLOATING_SUBNET_ID,
    FLOATING_SUBNET,
    FLOATING_SUBNET_TAGS,
    SUBNET_ID,
    NETWORK_ID,
    MEMBER_SUBNET_ID,
    PORT_ID,
    KEEP_FLOATINGIP,
    CONNECTION_LIMIT,
    LB_METHOD,
    PROXY_PROTOCOL,
    X_FORWARDED_FOR,
    TLS_CONTAINER_REF,
    TIMEOUT_CLIENT_DATA,
    TIMEOUT_MEMBER_CONNECT,
    TIMEOUT_MEMBER_DATA,
    TIMEOUT_TCP_INSPECT,
    FLAVOR_ID,
    AVAILABILITY_ZONE,
    ENABLE_HEALTH_MONITOR,
    HM_DELAY,
    HM_TIMEOUT,
    HM_MAX_RETRIES,
    HM_MAX_RETRIES_DOWN,
    NODE_SELECTOR,
    HOSTNAME,
    LB_ADDRESS,
    LB_ID,
)
"""Every annotation OCCM reads (plus the core source-ranges one, read by the controller)."""

LB_METHODS: Final = frozenset({"ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"})
PROVIDERS_KNOWN: Final = frozenset({"amphora", "octavia", "ovn", "f5", "amphorav2"})
MAX_NAME: Final = 255
LEGACY_NAME_LEN: Final = 32
FIP_DESCRIPTION: Final = "Floating IP for Kubernetes external service"
"""The prefix of the description OCCM gives the floating IPs it creates (its ownership mark)."""


def _cut(text: str, limit: int = MAX_NAME) -> str:
    """OCCM's Sprintf255: at most `limit` bytes (never splitting a character)."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[:limit].decode(errors="ignore")


def lb_name(cluster: str, service: ServiceInfo) -> str:
    return _cut(f"kube_service_{cluster}_{service.namespace}_{service.name}")


def legacy_name(service: ServiceInfo) -> str:
    return ("a" + service.uid.replace("-", ""))[:LEGACY_NAME_LEN]


# -- config ------------------------------------------------------------------------------
def _duration_s(key: str, value: str) -> int:
    """A Go duration ("5s", "1m30s"; OCCM's MyDuration) or a bare number of seconds, as
    whole seconds (Octavia's monitor fields), at least 1."""
    text = value.strip()
    try:
        seconds = float(text) if re.fullmatch(r"\d+", text) else parse_duration_s(text)
    except ValueError:
        raise ConfigError(
            f'[LoadBalancer] {key} = "{value}" is not a duration; write it as "5s" or "1m"'
        ) from None
    return max(1, round(seconds))


def _config_bool(section: str, key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off", ""):
        return False
    raise ConfigError(f'[{section}] {key} = "{value}" is not a boolean; write true or false')


def _config_int(section: str, key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigError(
            f'[{section}] {key} = "{value}" is not an integer; write a whole number'
        ) from None


CONFIG_KEYS: Final = frozenset(
    {
        "enabled",
        "lb-version",
        "use-octavia",
        "subnet-id",
        "member-subnet-id",
        "network-id",
        "floating-network-id",
        "floating-subnet-id",
        "floating-subnet",
        "floating-subnet-tags",
        "lb-method",
        "lb-provider",
        "create-monitor",
        "monitor-delay",
        "monitor-timeout",
        "monitor-max-retries",
        "monitor-max-retries-down",
        "manage-security-groups",
        "internal-lb",
        "node-selector",
        "cascade-delete",
        "flavor-id",
        "availability-zone",
        "enable-ingress-hostname",
        "ingress-hostname-suffix",
        "max-shared-lb",
        "container-store",
        "default-tls-container-ref",
        "provider-requires-serial-api-calls",
    }
)
"""Every `[LoadBalancer]` key OCCM reads."""

MAX_WRITES_KEY: Final = "trio-ccm-max-writes-in-flight"
MAX_CREATES_KEY: Final = "trio-ccm-max-creates-in-flight"
OUR_KEYS: Final = frozenset({MAX_WRITES_KEY, MAX_CREATES_KEY})
"""trio-ccm's own `[LoadBalancer]` keys (OCCM has none of them; docs/openstack.md)."""
DEFAULT_MAX_WRITES_IN_FLIGHT: Final = 4
"""Octavia writes in flight per provider (octavia.py says why there is a cap)."""
DEFAULT_MAX_CREATES_IN_FLIGHT: Final = 8
"""Load balancers being created at once per provider (loadbalancers.py says why)."""

CLASS_KEYS: Final = frozenset(
    {
        "floating-network-id",
        "floating-subnet-id",
        "floating-subnet",
        "floating-subnet-tags",
        "network-id",
        "subnet-id",
        "member-subnet-id",
    }
)


@dataclass(frozen=True, slots=True)
class LbClass:
    """One `[LoadBalancerClass "name"]` section: only the keys it sets."""

    values: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LbOptions:
    """The `[LoadBalancer]` section, with OCCM's defaults."""

    enabled: bool = True
    subnet_id: str = ""
    member_subnet_id: str = ""
    network_id: str = ""
    floating_network_id: str = ""
    floating_subnet_id: str = ""
    floating_subnet: str = ""
    floating_subnet_tags: str = ""
    lb_method: str = "ROUND_ROBIN"
    lb_provider: str = "amphora"
    create_monitor: bool = False
    monitor_delay_s: int = 5
    monitor_timeout_s: int = 3
    monitor_max_retries: int = 1
    monitor_max_retries_down: int = 3
    manage_security_groups: bool = False
    internal_lb: bool = False
    node_selector: str = ""
    cascade_delete: bool = True
    flavor_id: str = ""
    availability_zone: str = ""
    enable_ingress_hostname: bool = False
    ingress_hostname_suffix: str = "nip.io"
    max_shared_lb: int = 2
    container_store: str = "barbican"
    default_tls_container_ref: str = ""
    classes: Mapping[str, LbClass] = field(default_factory=dict)
    max_writes_in_flight: int = DEFAULT_MAX_WRITES_IN_FLIGHT  # ours, not OCCM's
    max_creates_in_flight: int = DEFAULT_MAX_CREATES_IN_FLIGHT  # ours, not OCCM's

    @classmethod
    def from_config(cls, config: CloudConfig) -> LbOptions:
        """The options of a parsed cloud.conf (its raw [LoadBalancer] sections)."""
        section = {k: v[-1] for k, v in config.load_balancer.values.items() if v}
        classes = {
            name: {k: v[-1] for k, v in raw.values.items() if v}
            for name, raw in config.load_balancer_classes.items()
        }
        return cls.parse(section, classes)

    @classmethod
    def parse(
        cls,
        section: Mapping[str, str] | None,
        classes: Mapping[str, Mapping[str, str]] | None = None,
    ) -> LbOptions:
        """Read `[LoadBalancer]` (keys as written) and the `[LoadBalancerClass "x"]`
        sections; an unknown key or a bad value is a ConfigError naming it."""
        raw = {k.strip().lower(): v for k, v in (section or {}).items()}
        unknown = sorted(set(raw) - CONFIG_KEYS - OUR_KEYS)
        if unknown:
            raise ConfigError(
                f"[LoadBalancer] has unknown keys {', '.join(unknown)}; remove them "
                "(docs/openstack.md lists the keys)"
            )
        s = "LoadBalancer"

        def text(key: str, default: str = "") -> str:
            return raw[key].strip() if key in raw else default

        def flag(key: str, default: bool) -> bool:
            return _config_bool(s, key, raw[key]) if key in raw else default

        def integer(key: str, default: int) -> int:
            return _config_int(s, key, raw[key]) if key in raw else default

        def seconds(key: str, default: int) -> int:
            return _duration_s(key, raw[key]) if key in raw else default

        version = text("lb-version")
        if version not in ("", "v2"):
            raise ConfigError(f'[LoadBalancer] lb-version = "{version}": only v2 exists')
        if flag("provider-requires-serial-api-calls", False):
            raise ConfigError(
                "[LoadBalancer] provider-requires-serial-api-calls = true is not supported: "
                "trio-ccm creates load balancers fully populated and updates members in one "
                "batch; remove the key (or set it false)"
            )
        method = text("lb-method", "ROUND_ROBIN").upper() or "ROUND_ROBIN"
        if method not in LB_METHODS:
            raise ConfigError(
                f'[LoadBalancer] lb-method = "{method}" is not one of '
                f"{', '.join(sorted(LB_METHODS))}"
            )
        store = text("container-store", "barbican") or "barbican"
        if store not in ("barbican", "external"):
            raise ConfigError(
                f'[LoadBalancer] container-store = "{store}": write barbican or external'
            )
        shared = integer("max-shared-lb", 2)
        if shared < 1:
            raise ConfigError(f"[LoadBalancer] max-shared-lb = {shared}: write 1 or more")
        caps = {
            key: integer(key, default)
            for key, default in (
                (MAX_WRITES_KEY, DEFAULT_MAX_WRITES_IN_FLIGHT),
                (MAX_CREATES_KEY, DEFAULT_MAX_CREATES_IN_FLIGHT),
            )
        }
        for key, cap in caps.items():
            if cap < 1:
                raise ConfigError(
                    f"[LoadBalancer] {key} = {cap}: write 1 or more (a cap of trio-ccm's, "
                    "docs/openstack.md)"
                )
        parsed_classes: dict[str, LbClass] = {}
        for name, values in (classes or {}).items():
            keys = {k.strip().lower(): v.strip() for k, v in values.items()}
            bad = sorted(set(keys) - CLASS_KEYS)
            if bad:
                raise ConfigError(
                    f'[LoadBalancerClass "{name}"] has unknown keys {", ".join(bad)}; the keys '
                    f"are {', '.join(sorted(CLASS_KEYS))}"
                )
            parsed_classes[name] = LbClass(keys)
        return cls(
            enabled=flag("enabled", True),
            subnet_id=text("subnet-id"),
            member_subnet_id=text("member-subnet-id"),
            network_id=text("network-id"),
            floating_network_id=text("floating-network-id"),
            floating_subnet_id=text("floating-subnet-id"),
            floating_subnet=text("floating-subnet"),
            floating_subnet_tags=text("floating-subnet-tags"),
            lb_method=method,
            lb_provider=text("lb-provider", "amphora") or "amphora",
            create_monitor=flag("create-monitor", False),
            monitor_delay_s=seconds("monitor-delay", 5),
            monitor_timeout_s=seconds("monitor-timeout", 3),
            monitor_max_retries=integer("monitor-max-retries", 1),
            monitor_max_retries_down=integer("monitor-max-retries-down", 3),
            manage_security_groups=flag("manage-security-groups", False),
            internal_lb=flag("internal-lb", False),
            node_selector=text("node-selector"),
            cascade_delete=flag("cascade-delete", True),
            flavor_id=text("flavor-id"),
            availability_zone=text("availability-zone"),
            enable_ingress_hostname=flag("enable-ingress-hostname", False),
            ingress_hostname_suffix=text("ingress-hostname-suffix", "nip.io") or "nip.io",
            max_shared_lb=shared,
            container_store=store,
            default_tls_container_ref=text("default-tls-container-ref"),
            classes=parsed_classes,
            max_writes_in_flight=caps[MAX_WRITES_KEY],
            max_creates_in_flight=caps[MAX_CREATES_KEY],
        )


# -- the plan ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MonitorPlan:
    name: str
    type: str
    delay_s: int
    timeout_s: int
    max_retries: int
    max_retries_down: int
    url_path: str = ""  # HTTP monitors: GET <url_path> expecting 200

    def body(self, pool_id: str | None = None) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "type": self.type,
            "delay": self.delay_s,
            "timeout": self.timeout_s,
            "max_retries": self.max_retries,
            "max_retries_down": self.max_retries_down,
        }
        if self.url_path:
            out |= {"http_method": "GET", "url_path": self.url_path, "expected_codes": "200"}
        if pool_id:
            out["pool_id"] = pool_id
        return out


@dataclass(frozen=True, slots=True)
class PortPlan:
    """One `spec.ports` entry: its listener, its pool, its monitor."""

    index: int
    protocol: str  # the listener's: TCP, UDP, SCTP, HTTP, TERMINATED_HTTPS
    port: int
    node_port: int
    pool_protocol: str  # TCP, UDP, SCTP, HTTP, PROXY, PROXYV2
    listener_name: str
    pool_name: str
    service_protocol: str  # spec.ports[].protocol
    connection_limit: int = -1
    timeouts_ms: tuple[int, int, int, int] = (50000, 5000, 50000, 0)
    allowed_cidrs: tuple[str, ...] = ()
    insert_xff: bool = False
    tls_ref: str = ""
    lb_method: str = "ROUND_ROBIN"
    source_ip_persistence: bool = False
    monitor: MonitorPlan | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.protocol, self.port)


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    address: str
    protocol_port: int
    monitor_port: int | None = None
    subnet_id: str = ""

    def body(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "address": self.address,
            "protocol_port": self.protocol_port,
        }
        if self.monitor_port:
            out["monitor_port"] = self.monitor_port
        if self.subnet_id:
            out["subnet_id"] = self.subnet_id
        return out


@dataclass(frozen=True, slots=True)
class LbPlan:
    """Everything the load balancer of one Service should be (no cloud ids but the user's)."""

    name: str
    legacy_name: str
    description: str
    internal: bool
    ports: tuple[PortPlan, ...]
    ipv6: bool
    vip_subnet_id: str
    vip_network_id: str
    vip_port_id: str
    vip_address: str  # internal or IPv6: spec.loadBalancerIP is the VIP
    member_subnet_id: str
    floating_network_id: str
    floating_subnet_id: str
    floating_subnet: str
    floating_subnet_tags: str
    loadbalancer_ip: str  # external IPv4: the floating IP to adopt
    keep_floating_ip: bool
    provider: str
    flavor_id: str
    availability_zone: str
    node_selector: Mapping[str, str]
    hostname: str
    proxy: bool
    shared_lb_id: str  # load-balancer-id annotation
    manage_security_groups: bool
    fip_description: str
    cluster: str

    def children_tags(self) -> tuple[str, ...]:
        return (self.name,)


def _refuse(service: ServiceInfo, annotation: str, value: str, fix: str) -> ServiceRefused:
    return ServiceRefused(f'Service {service.key}: annotation {annotation} = "{value}" {fix}')


class _Reader:
    """Annotations with OCCM's rules (presence wins, literal booleans), refusing nonsense."""

    def __init__(self, service: ServiceInfo) -> None:
        self.service = service
        self.ann = service.annotations

    def has(self, key: str) -> bool:
        return key in self.ann

    def text(self, key: str, default: str) -> str:
        return self.ann[key].strip() if key in self.ann else default

    def flag(self, key: str, default: bool) -> bool:
        if key not in self.ann:
            return default
        value = self.ann[key]
        if value == "true":
            return True
        if value == "false":
            return False
        raise _refuse(self.service, key, value, 'is not a boolean; write "true" or "false"')

    def integer(self, key: str, default: int, *, minimum: int = 0) -> int:
        if key not in self.ann:
            return default
        value = self.ann[key]
        try:
            number = int(value.strip())
        except ValueError:
            raise _refuse(
                self.service, key, value, "is not an integer; write a whole number"
            ) from None
        if number < minimum:
            raise _refuse(self.service, key, value, f"is below {minimum}; write {minimum} or more")
        return number


def _selector(text: str, where: str, service: ServiceInfo) -> dict[str, str]:
    """OCCM's node selector: `k=v, k2` (a bare key matches any value, written as "")."""
    out: dict[str, str] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, _, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not key:
            raise ServiceRefused(
                f'Service {service.key}: {where} = "{text}" has an empty key; write k=v, k2'
            )
        out[key] = value
    return out


def _cidrs(service: ServiceInfo, ipv6: bool) -> tuple[str, ...]:
    ranges = [r.strip() for r in service.load_balancer_source_ranges if r.strip()]
    if not ranges and service.annotations.get(SOURCE_RANGES, "").strip():
        ranges = [r.strip() for r in service.annotations[SOURCE_RANGES].split(",") if r.strip()]
    out = []
    for cidr in ranges:
        try:
            out.append(str(ipaddress.ip_network(cidr, strict=False)))
        except ValueError:
            raise ServiceRefused(
                f'Service {service.key}: load balancer source range "{cidr}" is not a CIDR; '
                "write it as 10.0.0.0/8"
            ) from None
    return tuple(sorted(set(out))) or (("::/0",) if ipv6 else ("0.0.0.0/0",))


_PROTOCOLS: Final = frozenset({"TCP", "UDP", "SCTP"})


def plan(service: ServiceInfo, options: LbOptions, cluster: str) -> LbPlan:
    """The plan for `service`, or ServiceRefused naming the annotation and the fix."""
    r = _Reader(service)
    name = lb_name(cluster, service)
    ipv6 = bool(service.ip_families) and service.ip_families[0] == "IPv6"
    if not service.ports:
        raise ServiceRefused(f"Service {service.key}: spec.ports is empty; add a port")
    # the class: its keys win over the annotations for the floating network, and (at
    # creation of an external load balancer) for the VIP subnet and network
    class_name = r.text(CLASS, "")
    klass: Mapping[str, str] = {}
    if r.has(CLASS):
        if class_name not in options.classes:
            known = ", ".join(sorted(options.classes)) or "none are configured"
            raise _refuse(
                service,
                CLASS,
                class_name,
                f'names no [LoadBalancerClass "{class_name}"] section; use one of: {known}',
            )
        klass = options.classes[class_name].values
    internal = options.internal_lb or r.flag(INTERNAL, False)

    def subnet_key(key: str, annotation: str, config: str) -> str:
        if not internal and key in klass and key in ("subnet-id", "network-id"):
            return klass[key]
        if r.has(annotation):
            return r.text(annotation, "")
        if key in klass:
            return klass[key]
        return config

    def floating_key(key: str, annotation: str, config: str) -> str:
        if key in klass:
            return klass[key]
        return r.text(annotation, config)

    vip_subnet = subnet_key("subnet-id", SUBNET_ID, options.subnet_id)
    vip_network = subnet_key("network-id", NETWORK_ID, options.network_id)
    member_subnet = subnet_key("member-subnet-id", MEMBER_SUBNET_ID, options.member_subnet_id)
    if not member_subnet:
        member_subnet = vip_subnet
    floating_network = floating_key(
        "floating-network-id", FLOATING_NETWORK_ID, options.floating_network_id
    )
    floating_subnet_id = floating_key(
        "floating-subnet-id", FLOATING_SUBNET_ID, options.floating_subnet_id
    )
    floating_subnet = floating_key("floating-subnet", FLOATING_SUBNET, options.floating_subnet)
    floating_tags = floating_key(
        "floating-subnet-tags", FLOATING_SUBNET_TAGS, options.floating_subnet_tags
    )

    method = r.text(LB_METHOD, options.lb_method).upper()
    if method not in LB_METHODS:
        raise _refuse(service, LB_METHOD, method, f"is not one of {', '.join(sorted(LB_METHODS))}")
    proxy_raw = r.text(PROXY_PROTOCOL, "")
    proxy_version = {"": "", "false": "", "true": "PROXY", "v1": "PROXY", "v2": "PROXYV2"}
    if proxy_raw not in proxy_version:
        raise _refuse(service, PROXY_PROTOCOL, proxy_raw, 'is not "true", "v1", "v2" or "false"')
    proxy = proxy_version[proxy_raw]
    xff = r.flag(X_FORWARDED_FOR, False)
    if xff and proxy:
        raise ServiceRefused(
            f"Service {service.key}: annotations {X_FORWARDED_FOR} and {PROXY_PROTOCOL} "
            "cannot be used together (HTTP headers or the PROXY protocol); remove one"
        )
    tls_ref = r.text(TLS_CONTAINER_REF, options.default_tls_container_ref)
    limit = r.integer(CONNECTION_LIMIT, -1, minimum=-1)
    timeouts = (
        r.integer(TIMEOUT_CLIENT_DATA, 50000),
        r.integer(TIMEOUT_MEMBER_CONNECT, 5000),
        r.integer(TIMEOUT_MEMBER_DATA, 50000),
        r.integer(TIMEOUT_TCP_INSPECT, 0),
    )
    monitors_on = r.flag(ENABLE_HEALTH_MONITOR, options.create_monitor)
    delay = r.integer(HM_DELAY, options.monitor_delay_s, minimum=1)
    timeout = r.integer(HM_TIMEOUT, options.monitor_timeout_s, minimum=1)
    retries = r.integer(HM_MAX_RETRIES, options.monitor_max_retries, minimum=1)
    retries_down = r.integer(HM_MAX_RETRIES_DOWN, options.monitor_max_retries_down, minimum=1)
    local = service.external_traffic_policy == "Local" and service.health_check_node_port > 0
    ovn = options.lb_provider == "ovn"
    if local and ovn:
        raise ServiceRefused(
            f"Service {service.key}: externalTrafficPolicy: Local needs an HTTP health "
            "monitor on the healthCheckNodePort and the ovn provider has none; set "
            "externalTrafficPolicy: Cluster or use lb-provider amphora"
        )
    node_selector = _selector(
        r.text(NODE_SELECTOR, options.node_selector),
        NODE_SELECTOR if r.has(NODE_SELECTOR) else "[LoadBalancer] node-selector",
        service,
    )
    cidrs = _cidrs(service, ipv6)
    ports: list[PortPlan] = []
    seen: set[tuple[str, int]] = set()
    for i, port in enumerate(service.ports):
        if port.protocol not in _PROTOCOLS:
            raise ServiceRefused(
                f"Service {service.key}: port {port.port} has protocol {port.protocol}; "
                "Octavia load balances TCP, UDP and SCTP"
            )
        if tls_ref and port.protocol == "TCP":
            listener = "TERMINATED_HTTPS"
        elif xff and port.protocol == "TCP":
            listener = "HTTP"
        else:
            listener = port.protocol
        if proxy and port.protocol != "TCP":
            raise ServiceRefused(
                f"Service {service.key}: {PROXY_PROTOCOL} applies to TCP ports only and port "
                f"{port.port} is {port.protocol}; remove the annotation or the port "
                "(Octavia answers 409)"
            )
        if proxy:
            pool = proxy
        elif listener in ("HTTP", "TERMINATED_HTTPS"):
            pool = "HTTP"
        else:
            pool = listener
        if (listener, port.port) in seen:
            raise ServiceRefused(
                f"Service {service.key}: port {port.port}/{port.protocol} appears twice"
            )
        seen.add((listener, port.port))
        monitor: MonitorPlan | None = None
        if monitors_on or local:
            # OCCM's types: the Service port's protocol (UDP-CONNECT for UDP); an HTTP
            # GET /healthz on the healthCheckNodePort for externalTrafficPolicy: Local
            kind = "HTTP" if local else {"UDP": "UDP-CONNECT"}.get(port.protocol, port.protocol)
            path = "/healthz" if local else ""
            monitor = MonitorPlan(
                name=_cut(f"monitor_{i}_{name}"),
                type=kind,
                delay_s=delay,
                timeout_s=timeout,
                max_retries=retries,
                max_retries_down=retries_down,
                url_path=path,
            )
        ports.append(
            PortPlan(
                index=i,
                protocol=listener,
                port=port.port,
                node_port=port.node_port,
                pool_protocol=pool,
                listener_name=_cut(f"listener_{i}_{name}"),
                pool_name=_cut(f"pool_{i}_{name}"),
                service_protocol=port.protocol,
                connection_limit=limit,
                timeouts_ms=timeouts,
                allowed_cidrs=cidrs,
                insert_xff=xff,
                tls_ref=tls_ref if listener == "TERMINATED_HTTPS" else "",
                lb_method=method,
                source_ip_persistence=service.session_affinity == "ClientIP",
                monitor=monitor,
            )
        )
    lb_ip = service.load_balancer_ip.strip()
    if lb_ip:
        try:
            ipaddress.ip_address(lb_ip)
        except ValueError:
            raise ServiceRefused(
                f'Service {service.key}: spec.loadBalancerIP "{lb_ip}" is not an IP address'
            ) from None
    shared_id = r.text(LB_ID, "")
    return LbPlan(
        name=name,
        legacy_name=legacy_name(service),
        description=_cut(
            f"Kubernetes external service {service.namespace}/{service.name} from cluster {cluster}"
        ),
        internal=internal,
        ports=tuple(ports),
        ipv6=ipv6,
        vip_subnet_id=vip_subnet,
        vip_network_id=vip_network,
        vip_port_id=r.text(PORT_ID, ""),
        vip_address=lb_ip if (internal or ipv6) else "",
        member_subnet_id=member_subnet,
        floating_network_id=floating_network,
        floating_subnet_id=floating_subnet_id,
        floating_subnet=floating_subnet,
        floating_subnet_tags=floating_tags,
        loadbalancer_ip=lb_ip if not (internal or ipv6) else "",
        keep_floating_ip=r.flag(KEEP_FLOATINGIP, False),
        provider=options.lb_provider,
        flavor_id=r.text(FLAVOR_ID, options.flavor_id),
        availability_zone=r.text(AVAILABILITY_ZONE, options.availability_zone),
        node_selector=node_selector,
        hostname=r.text(HOSTNAME, ""),
        proxy=bool(proxy),
        shared_lb_id=shared_id,
        manage_security_groups=options.manage_security_groups,
        cluster=cluster,
        fip_description=_cut(
            f"{FIP_DESCRIPTION} {service.namespace}/{service.name} from cluster {cluster}"
        ),
    )


def _address(node: NodeInfo, ipv6: bool) -> str:
    for kind in ("InternalIP", "ExternalIP"):
        for a in node.addresses:
            if a.type != kind:
                continue
            try:
                family6 = ipaddress.ip_address(a.address).version == 6
            except ValueError:
                continue
            if family6 == ipv6:
                return a.address
    return ""


def members(
    lb: LbPlan, port: PortPlan, nodes: Sequence[NodeInfo], health_port: int
) -> tuple[Member, ...]:
    """OCCM's members: one per selected Node with an address of the Service's family, on the
    NodePort, named by the Node (none when the port has no NodePort)."""
    if not port.node_port:
        return ()
    out = []
    for node in nodes:
        if any(
            k not in node.labels or (v and node.labels[k] != v) for k, v in lb.node_selector.items()
        ):
            continue
        address = _address(node, lb.ipv6)
        if not address:
            continue
        out.append(
            Member(
                name=node.name,
                address=address,
                protocol_port=port.node_port,
                monitor_port=health_port if (port.monitor and health_port) else None,
                subnet_id=lb.member_subnet_id,
            )
        )
    return tuple(sorted(out, key=lambda m: (m.name, m.address)))
