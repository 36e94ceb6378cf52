"""Frozen, validated settings: what the command line (or an embedding program) asked for.

`Settings` holds every effective setting, durations in seconds (names end in `_s`), with
upstream's defaults (ours where noted). Building one validates it: a `FlagError` lists
every bad field by the flag that sets it (`flag_of`), with a value range for every number
and duration, so a bad value is refused when it is given rather than when it is used.
`trio_ccm.cli.flags` turns a Go-style command line into Settings; docs/operations.md is the
operator's reference.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from trio_ccm.base.govalues import format_duration
from trio_ccm.errors import ConfigError

__all__ = [
    "CLOUD_RATE_FAMILIES",
    "COMPATIBILITY_FLAGS",
    "CONTROLLER_TOKEN_RE",
    "FlagError",
    "Settings",
    "cidrs_of",
    "controller_token_message",
    "flag_of",
    "format_setting",
    "node_mask_sizes",
    "rewrite_alias",
]


class FlagError(ConfigError):
    """A bad command line or setting. The message names the flag and what to write instead."""


_NO_ALIASES: Final[Mapping[str, str]] = MappingProxyType({})

CLOUD_RATE_FAMILIES: Final = ("instances", "load_balancers", "routes")
"""The cloud-call families `--cloud-api-rate` can limit."""

CONTROLLER_TOKEN_RE: Final = re.compile(r"\*|-?[A-Za-z0-9][A-Za-z0-9_.-]*")
"""One `--controllers` item: `*`, NAME or -NAME."""

_LEADER_DURATIONS: Final = (
    "--leader-elect-lease-duration",
    "--leader-elect-renew-deadline",
    "--leader-elect-retry-period",
)
# Flags named otherwise than their field (the rule: drop `_s`, `_` -> `-`).
_FLAG_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {"verbosity": "v", "cloud_rates": "cloud-api-rate"}
)


def flag_of(field: str) -> str:
    """The flag that sets Settings field `field`, e.g. `--leader-elect-lease-duration`."""
    return "--" + _FLAG_NAMES.get(field, field.removesuffix("_s").replace("_", "-"))


def format_setting(field: str, value: object) -> str:
    """`value` of `field` as its flag takes it (`15s`, `true`, `a,b`, `instances=5.0:10`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if field == "cloud_rates":
        assert isinstance(value, tuple)
        return ",".join(f"{family}={float(qps)!r}:{burst}" for family, qps, burst in value)
    if field.endswith("_s"):
        assert isinstance(value, float | int)
        return format_duration(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What the command line asked for, validated. Durations are seconds (names end in `_s`).

    Building one validates it: a FlagError lists every bad field by its flag.
    """

    cloud_provider: str = ""
    cloud_config: str = ""
    kubeconfig: str = ""
    master: str = ""
    kube_api_qps: float = 20.0
    kube_api_burst: int = 30
    # Tokens as given, aliases rewritten to canonical names (keeping a leading "-").
    controllers: tuple[str, ...] = ("*",)
    leader_elect: bool = True
    leader_elect_lease_duration_s: float = 15.0
    leader_elect_renew_deadline_s: float = 10.0
    leader_elect_retry_period_s: float = 2.0
    leader_elect_resource_lock: str = "leases"
    leader_elect_resource_name: str = "cloud-controller-manager"
    leader_elect_resource_namespace: str = "kube-system"
    # Ours: upstream exits 1 on lease loss; we campaign again unless this is set.
    exit_on_lost_lease: bool = False
    cluster_name: str = "kubernetes"
    cluster_cidr: str = ""
    allocate_node_cidrs: bool = False
    cidr_allocator_type: str = "RangeAllocator"
    # 0 = not given: the per-family defaults (24 for IPv4, 64 for IPv6) apply.
    node_cidr_mask_size: int = 0
    node_cidr_mask_size_ipv4: int = 0
    node_cidr_mask_size_ipv6: int = 0
    service_cluster_ip_range: str = ""
    configure_cloud_routes: bool = True
    route_reconciliation_period_s: float = 10.0
    node_monitor_period_s: float = 5.0
    # Ours: upstream's default is 1; Node initialisation is concurrent by default.
    concurrent_node_syncs: int = 10
    concurrent_node_status_updates: int = 0
    node_status_update_frequency_s: float = 300.0
    concurrent_service_syncs: int = 1
    min_resync_period_s: float = 43200.0
    controller_start_interval_s: float = 0.0
    secure_port: int = 10258
    bind_address: str = "0.0.0.0"  # noqa: S104 - upstream's --bind-address default
    cert_dir: str = ""
    tls_cert_file: str = ""
    tls_private_key_file: str = ""
    # Ours: serve the secure port without TLS.
    plain_http: bool = False
    verbosity: int = 0
    logging_format: str = ""  # "" = json off a TTY, text on a TTY
    # Ours: (family, qps, burst) per cloud-call family, from --cloud-api-rate.
    cloud_rates: tuple[tuple[str, float, int], ...] = ()
    cloud_batch_window_s: float = 0.02
    cloud_batch_size: int = 200
    # Ours: the sweep for leaked load balancers (providers with a LoadBalancerInventory).
    load_balancer_sweep_period_s: float = 600.0
    delete_leaked_load_balancers: bool = False
    leaked_load_balancer_grace_s: float = 1800.0
    # Accepted-but-ineffective flags that were given, as "--name".
    ignored_flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise FlagError("; ".join(problems))

    def enabled_controllers(
        self,
        known: Sequence[str],
        aliases: Mapping[str, str] = _NO_ALIASES,
        disabled_by_default: Collection[str] = (),
    ) -> list[str]:
        """The controllers `--controllers` enables, in `known` order.

        Per controller, the first token that is its name enables it and the first `-name`
        disables it; otherwise it runs iff `*` was given and it is not disabled by default.
        Aliases are rewritten first. A token naming no known controller is a FlagError.
        """
        tokens = [rewrite_alias(token, aliases) for token in self.controllers]
        unknown = [
            t.removeprefix("-") for t in tokens if t != "*" and t.removeprefix("-") not in known
        ]
        if unknown:
            alias_note = f" (aliases: {', '.join(sorted(aliases))})" if aliases else ""
            close = difflib.get_close_matches(unknown[0], [*known, *aliases], n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise FlagError(
                f"--controllers={','.join(self.controllers)}: unknown controller "
                f"{', '.join(repr(u) for u in unknown)}{hint}; known controllers are "
                f"{', '.join(known)}{alias_note}"
            )
        star = "*" in tokens
        enabled = []
        for name in known:
            decision = None
            for token in tokens:
                if token == name:
                    decision = True
                    break
                if token == "-" + name:
                    decision = False
                    break
            if decision is None:
                decision = star and name not in disabled_by_default
            if decision:
                enabled.append(name)
        return enabled

    def configz(self) -> dict[str, object]:
        """The effective settings as a JSON-able document for `/configz`, secrets redacted."""
        values: dict[str, object] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "master":
                value = _redact_userinfo(value)
            elif field.name == "cloud_rates":
                value = [{"family": f, "qps": q, "burst": b} for f, q, b in value]
            elif isinstance(value, tuple):
                value = list(value)
            values[field.name] = value
        return {
            "kind": "CloudControllerManagerConfiguration",
            "apiVersion": "cloudcontrollermanager.config.k8s.io/v1alpha1",
            "settings": values,
        }


# Upstream flags accepted for compatibility without effect, with their Go type (the parser
# reads their values that way; `Settings.ignored_flags` may name only these).
COMPATIBILITY_FLAGS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "kube-api-content-type": "str",
        "profiling": "bool",
        "contention-profiling": "bool",
        "feature-gates": "str",
        "use-service-account-credentials": "bool",
        "external-cloud-volume-plugin": "str",
        "allow-untagged-cloud": "bool",
        "node-sync-period": "duration",
        "enable-leader-migration": "bool",
        "leader-migration-config": "str",
        "authentication-kubeconfig": "str",
        "authentication-skip-lookup": "bool",
        "authentication-token-webhook-cache-ttl": "duration",
        "authentication-tolerate-lookup-failure": "bool",
        "authorization-kubeconfig": "str",
        "authorization-always-allow-paths": "strings",
        "authorization-webhook-cache-authorized-ttl": "duration",
        "authorization-webhook-cache-unauthorized-ttl": "duration",
        "client-ca-file": "str",
        "requestheader-client-ca-file": "str",
        "requestheader-allowed-names": "strings",
        "requestheader-username-headers": "strings",
        "requestheader-group-headers": "strings",
        "requestheader-extra-headers-prefix": "strings",
        "requestheader-uid-headers": "strings",
        "tls-cipher-suites": "strings",
        "tls-curve-preferences": "strings",
        "tls-min-version": "str",
        "tls-sni-cert-key": "str",
        "http2-max-streams-per-connection": "int",
        "disable-http2-serving": "bool",
        "permit-port-sharing": "bool",
        "permit-address-sharing": "bool",
        "vmodule": "str",
        "log-flush-frequency": "duration",
        "webhooks": "strings",
        "webhook-secure-port": "int",
        "webhook-bind-address": "ip",
        "webhook-cert-dir": "str",
    }
)


def rewrite_alias(token: str, aliases: Mapping[str, str]) -> str:
    """A `--controllers` token with an alias replaced by its canonical name."""
    if token.startswith("-"):
        return "-" + aliases.get(token[1:], token[1:])
    return aliases.get(token, token)


def controller_token_message(flag: str, value: str, token: str) -> str:
    if not token:
        return f"{flag}={value}: empty controller name; separate names with single commas"
    return (
        f"{flag}={value}: {token!r} is not '*', NAME or -NAME "
        "(no spaces; e.g. --controllers=*,-node-route-controller)"
    )


def _redact_userinfo(url: str) -> str:
    """`url` with any `user:password@` before the host replaced by `REDACTED@`."""
    start = url.find("://")
    start = start + 3 if start >= 0 else 0
    end = len(url)
    for stop in "/?#":
        found = url.find(stop, start)
        if found >= 0:
            end = min(end, found)
    at = url.rfind("@", start, end)
    if at < 0:
        return url
    return f"{url[:start]}REDACTED{url[at:]}"


# --- validation ---------------------------------------------------------------------------


_HOUR: Final = 3600.0
_DAY: Final = 24 * _HOUR
# (least, most, least excluded) per numeric field: sane ranges, checked when given.
_RANGES: Final[Mapping[str, tuple[float, float, bool]]] = MappingProxyType(
    {
        "kube_api_qps": (0.0, 10_000.0, True),
        "kube_api_burst": (1, 100_000, False),
        "leader_elect_lease_duration_s": (0.0, _HOUR, True),
        "leader_elect_renew_deadline_s": (0.0, _HOUR, True),
        "leader_elect_retry_period_s": (0.0, _HOUR, True),
        "route_reconciliation_period_s": (0.0, _DAY, True),
        "node_monitor_period_s": (0.0, _DAY, True),
        "node_status_update_frequency_s": (0.0, _DAY, True),
        "concurrent_node_syncs": (1, 10_000, False),
        "concurrent_node_status_updates": (0, 10_000, False),
        "concurrent_service_syncs": (1, 10_000, False),
        "min_resync_period_s": (1.0, 7 * _DAY, False),
        "controller_start_interval_s": (0.0, _HOUR, False),
        "secure_port": (0, 65_535, False),
        "verbosity": (0, 10, False),
        # A batch that waits longer than this holds up every Node lookup it collects.
        "cloud_batch_window_s": (0.0, 5.0, False),
        "cloud_batch_size": (1, 10_000, False),
        "load_balancer_sweep_period_s": (0.0, _DAY, False),  # 0s: no sweep
        "leaked_load_balancer_grace_s": (0.0, 7 * _DAY, False),
    }
)
_RATE_QPS_MAX: Final = 10_000.0
_RATE_BURST_MAX: Final = 100_000


def _range_problem(field: str, value: float) -> str | None:
    """Why `value` is out of `field`'s range (naming flag, value and range), or None."""
    least, most, excluded = _RANGES[field]
    low_ok = value > least if excluded else value >= least
    if math.isfinite(value) and low_ok and value <= most:
        return None
    shown = f"{flag_of(field)}={format_setting(field, value)}"
    if field.endswith("_s"):
        low, high = format_duration(least), format_duration(most)
        if excluded:
            return f"{shown}: must be more than {low} and at most {high}"
        return f"{shown}: must be from {low} to {high}"
    if excluded:
        return f"{shown}: must be more than {least:g} and at most {most:g}"
    return f"{shown}: must be {least:g} to {most:g}"


def _problems(s: Settings) -> list[str]:
    """Everything wrong with `s`, each naming its flag; empty when valid."""
    problems: list[str] = []

    def show(field: str) -> str:
        return f"{flag_of(field)}={format_setting(field, getattr(s, field))}"

    for field in _RANGES:
        if field.startswith("leader_elect_") and not s.leader_elect:
            continue  # unused without election (upstream does not check them either)
        problem = _range_problem(field, getattr(s, field))
        if problem is not None:
            problems.append(problem)
    if s.leader_elect:
        lease = s.leader_elect_lease_duration_s
        renew = s.leader_elect_renew_deadline_s
        retry = s.leader_elect_retry_period_s
        if not lease > renew > 1.2 * retry > 0:
            given = ", ".join(
                show(field)
                for field in (
                    "leader_elect_lease_duration_s",
                    "leader_elect_renew_deadline_s",
                    "leader_elect_retry_period_s",
                )
            )
            problems.append(
                f"{given}: need {_LEADER_DURATIONS[0]} > {_LEADER_DURATIONS[1]} > "
                f"1.2 x {_LEADER_DURATIONS[2]} > 0 (defaults 15s, 10s, 2s)"
            )
        if s.leader_elect_resource_lock != "leases":
            problems.append(
                f"{show('leader_elect_resource_lock')}: only leases is supported "
                "(or --leader-elect=false)"
            )
    if not _is_ip(s.bind_address):
        problems.append(f"{show('bind_address')}: not an IP address, e.g. 0.0.0.0 or ::")
    if bool(s.tls_cert_file) != bool(s.tls_private_key_file):
        problems.append(
            "--tls-cert-file and --tls-private-key-file go together: give both or neither"
        )
    if s.plain_http and s.tls_cert_file:
        problems.append("--plain-http serves without TLS: drop it or drop --tls-cert-file")
    if s.logging_format not in ("", "text", "json"):
        problems.append(f"{show('logging_format')}: write text or json")
    if s.cidr_allocator_type != "RangeAllocator":
        problems.append(f"{show('cidr_allocator_type')}: only RangeAllocator is supported")
    problems += _cidr_problems(s.cluster_cidr)
    problems += _ipam_problems(s)
    problems += _controllers_problems(s.controllers)
    problems += _rate_problems(s.cloud_rates)
    problems += [
        f"ignored_flags: {name!r} is not a flag accepted for compatibility"
        for name in s.ignored_flags
        if not name.startswith("--") or name[2:] not in COMPATIBILITY_FLAGS
    ]
    return problems


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _cidr_problems(cluster_cidr: str) -> list[str]:
    if not cluster_cidr:
        return []
    versions = []
    for part in cluster_cidr.split(","):
        try:
            versions.append(ipaddress.ip_network(part, strict=False).version)
        except ValueError:
            return [f"--cluster-cidr={cluster_cidr}: {part!r} is not a CIDR, e.g. 10.244.0.0/16"]
    if len(versions) > 2 or len(set(versions)) != len(versions):
        return [
            f"--cluster-cidr={cluster_cidr}: give one CIDR, or one IPv4 and one IPv6 (dual stack)"
        ]
    return []


def cidrs_of(value: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The CIDRs of a comma-separated flag value (already validated; host bits dropped)."""
    return [ipaddress.ip_network(part.strip(), strict=False) for part in value.split(",") if part]


def node_mask_sizes(s: Settings) -> dict[int, int]:
    """The pod CIDR prefix length per IP version, after the flags' defaults (24 and 64)."""
    return {
        4: s.node_cidr_mask_size_ipv4 or s.node_cidr_mask_size or 24,
        6: s.node_cidr_mask_size_ipv6 or s.node_cidr_mask_size or 64,
    }


def _ipam_problems(s: Settings) -> list[str]:
    """Upstream's node-IPAM checks (kube-controller-manager's nodeipam options)."""
    problems = []
    generic = s.node_cidr_mask_size
    per_family = s.node_cidr_mask_size_ipv4 or s.node_cidr_mask_size_ipv6
    if generic and per_family:
        problems.append(
            "--node-cidr-mask-size and --node-cidr-mask-size-ipv4/-ipv6 are exclusive: "
            "give the generic one (single stack) or the per-family ones"
        )
    for field, most in (
        ("node_cidr_mask_size", 128),
        ("node_cidr_mask_size_ipv4", 32),
        ("node_cidr_mask_size_ipv6", 128),
    ):
        value = getattr(s, field)
        if value and not 0 < value <= most:
            problems.append(f"--{field.replace('_', '-')}={value}: must be 1 to {most}")
    services: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for part in s.service_cluster_ip_range.split(",") if s.service_cluster_ip_range else []:
        try:
            services.append(ipaddress.ip_network(part.strip(), strict=False))
        except ValueError:
            problems.append(
                f"--service-cluster-ip-range={s.service_cluster_ip_range}: {part!r} is not a "
                "CIDR, e.g. 10.96.0.0/12"
            )
    if len(services) > 2 or len({n.version for n in services}) != len(services):
        problems.append(
            f"--service-cluster-ip-range={s.service_cluster_ip_range}: give one CIDR, or one "
            "IPv4 and one IPv6"
        )
    if not s.allocate_node_cidrs or problems or _cidr_problems(s.cluster_cidr):
        return problems
    if not s.cluster_cidr:
        return ["--allocate-node-cidrs needs --cluster-cidr (the range Node pod CIDRs come from)"]
    clusters = cidrs_of(s.cluster_cidr)
    if generic and len(clusters) > 1:
        problems.append(
            "--node-cidr-mask-size is for a single-stack --cluster-cidr; with two CIDRs give "
            "--node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6"
        )
    sizes = node_mask_sizes(s)
    for cluster in clusters:
        size = sizes[cluster.version]
        flag = "--node-cidr-mask-size" + ("" if generic else f"-ipv{cluster.version}")
        if size < cluster.prefixlen:
            problems.append(
                f"{flag}={size}: a Node's pod CIDR cannot be larger than --cluster-cidr "
                f"{cluster}; give a prefix length of at least {cluster.prefixlen}"
            )
        elif size - cluster.prefixlen > 16:
            problems.append(
                f"{flag}={size}: --cluster-cidr {cluster} would hold more than 65536 Node "
                f"CIDRs; give a prefix length of at most {cluster.prefixlen + 16}"
            )
    return problems


def _controllers_problems(controllers: tuple[str, ...]) -> list[str]:
    value = ",".join(controllers)
    return [
        controller_token_message("--controllers", value, token)
        for token in controllers
        if not CONTROLLER_TOKEN_RE.fullmatch(token)
    ]


def _rate_problems(rates: tuple[tuple[str, float, int], ...]) -> list[str]:
    problems = []
    seen: set[str] = set()
    for family, qps, burst in rates:
        item = f"--cloud-api-rate={family}={qps!r}:{burst}"
        if family not in CLOUD_RATE_FAMILIES:
            problems.append(
                f"{item}: unknown family {family!r}; use {', '.join(CLOUD_RATE_FAMILIES)}"
            )
        elif family in seen:
            problems.append(f"{item}: family {family} is given twice; give it once")
        seen.add(family)
        if not (math.isfinite(qps) and 0 < qps <= _RATE_QPS_MAX):
            problems.append(f"{item}: QPS must be more than 0 and at most {_RATE_QPS_MAX:g}")
        if not 1 <= burst <= _RATE_BURST_MAX:
            problems.append(f"{item}: burst must be 1 to {_RATE_BURST_MAX}")
    return problems
