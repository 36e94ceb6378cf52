"""Frozen, validated settings, built from the Go cloud-controller-manager's command line.

`parse_flags` reads argv with the rules of Go's pflag as the upstream binary registers its
flags: `--flag=value` or `--flag value`; booleans as `--flag` or `--flag=false` (never
`--flag false`); `_` and `-` are the same in names; `-v` is the only shorthand besides `-h`;
durations use Go syntax (`15s`, `1m30s`, `500ms`, `0`). Flags that upstream has and we do
not implement are accepted and recorded in `Settings.ignored_flags`, so existing manifests
keep working and the cli can say which ones had no effect.

`--help`/`-h` and `--version` belong to the cli: it asks `wants_help` and `wants_version`
first, and `parse_flags` skips them. docs/operations.md is the operator's reference.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
import textwrap
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final, Literal

from trio_ccm.errors import ConfigError

__all__ = [
    "CLOUD_RATE_FAMILIES",
    "FlagError",
    "Settings",
    "cidrs_of",
    "format_duration",
    "node_mask_sizes",
    "parse_flags",
    "usage",
    "wants_help",
    "wants_version",
]


class FlagError(ConfigError):
    """A bad command line. The message names the flag and what to write instead."""


_NO_ALIASES: Final[Mapping[str, str]] = MappingProxyType({})
_USAGE_WIDTH: Final = 100

CLOUD_RATE_FAMILIES: Final = ("instances", "load_balancers", "routes")
"""The cloud-call families `--cloud-api-rate` can limit."""

_LEADER_DURATIONS: Final = (
    "--leader-elect-lease-duration",
    "--leader-elect-renew-deadline",
    "--leader-elect-retry-period",
)
# Fields that are loop periods: 0 would make the loop spin.
_POSITIVE_PERIODS: Final = (
    "route_reconciliation_period_s",
    "node_monitor_period_s",
    "node_status_update_frequency_s",
)


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
        tokens = [_rewrite_alias(token, aliases) for token in self.controllers]
        unknown = [
            t.removeprefix("-") for t in tokens if t != "*" and t.removeprefix("-") not in known
        ]
        if unknown:
            alias_note = f" (aliases: {', '.join(sorted(aliases))})" if aliases else ""
            raise FlagError(
                f"--controllers={','.join(self.controllers)}: unknown controller "
                f"{', '.join(repr(u) for u in unknown)}; known controllers are "
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

    def to_flags(self) -> list[str]:
        """The settings that differ from the defaults, as `--flag=value` for `parse_flags`."""
        defaults = Settings()
        flags = []
        for spec in _FLAGS:
            value = getattr(self, spec.field)
            if value != getattr(defaults, spec.field):
                flags.append(f"--{spec.name}={_format_value(spec.kind, value)}")
        for name in self.ignored_flags:
            flags.append(f"{name}={_NEUTRAL[_IGNORED_BY_NAME[name.removeprefix('--')].kind]}")
        return flags


def parse_flags(
    argv: Sequence[str], *, controller_aliases: Mapping[str, str] = _NO_ALIASES
) -> Settings:
    """Settings from a Go-style command line (argv without the program name).

    `controller_aliases` maps short controller names to canonical ones; `--controllers`
    tokens are rewritten with it. Raises FlagError naming the flag on any problem.
    `--help`, `-h` and `--version` are skipped: the cli checks `wants_help`/`wants_version`
    first.
    """
    values: dict[str, Any] = {}
    controllers: list[str] | None = None
    rates: list[tuple[str, float, int]] = []
    ignored: list[str] = []
    previous: _Token | None = None
    for token in _tokens(argv):
        if token.name is None:
            raise FlagError(_positional_message(token.raw, previous))
        previous = token
        if token.form == "bad":
            raise FlagError(_single_dash_message(token))
        flag = f"-{token.raw[1]}" if token.form == "short" else f"--{token.name}"
        kind = _KINDS.get(token.name)
        if kind is None:
            raise FlagError(f"unknown flag: {flag} (see --help)")
        if kind in _BOOL_LIKE:
            value = token.value if token.value is not None else "true"
        elif token.value is None:
            raise FlagError(f"{flag}: the flag needs a value, e.g. {flag}=VALUE")
        else:
            value = token.value
        converted = _convert(kind, flag, value)
        if token.name in _IGNORED_BY_NAME:
            if f"--{token.name}" not in ignored:
                ignored.append(f"--{token.name}")
        elif kind == "cli":
            continue
        elif kind == "controllers":
            assert isinstance(converted, list)
            tokens = [_rewrite_alias(t, controller_aliases) for t in converted]
            controllers = tokens if controllers is None else [*controllers, *tokens]
        elif kind == "rates":
            assert isinstance(converted, list)
            rates.extend(converted)
        else:
            values[_BY_NAME[token.name].field] = converted
    if controllers is not None:
        values["controllers"] = tuple(controllers)
    return Settings(**values, cloud_rates=tuple(rates), ignored_flags=tuple(ignored))


def wants_help(argv: Sequence[str]) -> bool:
    """Whether the command line asks for help (`--help`, `-h`, `--help=true`)."""
    return any(
        token.name == "help"
        and token.form != "bad"
        and (token.value is None or _parse_bool(token.value))
        for token in _tokens(argv)
    )


def wants_version(argv: Sequence[str]) -> bool:
    """Whether the command line asks for the version (`--version`, `--version=true|raw`)."""
    return any(
        token.name == "version"
        and token.form != "bad"
        and (token.value is None or token.value == "raw" or _parse_bool(token.value))
        for token in _tokens(argv)
    )


def usage() -> str:
    """The `--help` text: every effective flag with its default and meaning."""
    rows = [
        (_flag_column(spec), f"{spec.meaning} {_default_note(spec)}{_ORIGIN_NOTES[spec.origin]}")
        for spec in _FLAGS
    ]
    rows += [("  -h, --help", "print this help and exit"), ("      --version", "print the version")]
    width = max(len(left) for left, _ in rows) + 2
    lines = [
        "Usage: trio-ccm [flags]",
        "",
        "A Kubernetes cloud-controller-manager on Trio. Flags follow the Go",
        "cloud-controller-manager: --flag=value or --flag value; booleans as --flag or",
        "--flag=false; durations like 15s, 1m30s, 500ms.",
        "",
        "Flags:",
    ]
    for left, right in rows:
        wrapped = textwrap.wrap(
            right, width=_USAGE_WIDTH - width, break_on_hyphens=False, break_long_words=False
        ) or [""]
        lines.append(f"{left:<{width}}{wrapped[0]}")
        lines += [" " * width + more for more in wrapped[1:]]
    ignored = ", ".join(f"--{spec.name}" for spec in _IGNORED)
    lines += [
        "",
        *textwrap.wrap(
            "Accepted for compatibility with the Go cloud-controller-manager, without effect "
            f"(see docs/operations.md): {ignored}.",
            width=_USAGE_WIDTH,
            break_on_hyphens=False,
        ),
    ]
    return "\n".join(lines) + "\n"


# --- the flag tables ---------------------------------------------------------------------

_Kind = Literal[
    "str", "bool", "int", "float", "duration", "ip", "controllers", "rates", "strings", "cli"
]
_BOOL_LIKE: Final = frozenset({"bool", "cli"})
_TYPE_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "str": "string",
        "bool": "",
        "int": "int",
        "float": "float",
        "duration": "duration",
        "ip": "ip",
        "controllers": "strings",
        "rates": "FAMILY=QPS:BURST,...",
        "strings": "strings",
    }
)


_ORIGIN_NOTES: Final[Mapping[str, str]] = MappingProxyType(
    {"upstream": "", "ours": " [trio-ccm]", "upstream, our default": " [our default]"}
)


@dataclass(frozen=True)
class _Flag:
    name: str
    field: str
    kind: _Kind
    meaning: str
    origin: Literal["upstream", "ours", "upstream, our default"] = "upstream"


@dataclass(frozen=True)
class _Ignored:
    name: str
    kind: _Kind


_FLAGS: Final = (
    _Flag("cloud-provider", "cloud_provider", "str", "cloud provider name, e.g. sim; required"),
    _Flag("cloud-config", "cloud_config", "str", "path of the cloud provider's config file"),
    _Flag("kubeconfig", "kubeconfig", "str", "kubeconfig path; empty = in-cluster config"),
    _Flag("master", "master", "str", "API server URL; overrides the kubeconfig's server"),
    _Flag("kube-api-qps", "kube_api_qps", "float", "client-side QPS to the API server"),
    _Flag("kube-api-burst", "kube_api_burst", "int", "client-side burst to the API server"),
    _Flag(
        "controllers",
        "controllers",
        "controllers",
        "controllers to run: * = all on by default, NAME on, -NAME off",
    ),
    _Flag("leader-elect", "leader_elect", "bool", "campaign for the Lease before acting"),
    _Flag(
        "leader-elect-lease-duration",
        "leader_elect_lease_duration_s",
        "duration",
        "how long a standby waits before taking over an unrenewed Lease",
    ),
    _Flag(
        "leader-elect-renew-deadline",
        "leader_elect_renew_deadline_s",
        "duration",
        "how long the leader retries renewing before it stops acting",
    ),
    _Flag(
        "leader-elect-retry-period",
        "leader_elect_retry_period_s",
        "duration",
        "pause between acquire/renew attempts",
    ),
    _Flag(
        "leader-elect-resource-lock",
        "leader_elect_resource_lock",
        "str",
        "lock kind; only leases",
    ),
    _Flag(
        "leader-elect-resource-name",
        "leader_elect_resource_name",
        "str",
        "name of the Lease",
    ),
    _Flag(
        "leader-elect-resource-namespace",
        "leader_elect_resource_namespace",
        "str",
        "namespace of the Lease",
    ),
    _Flag(
        "exit-on-lost-lease",
        "exit_on_lost_lease",
        "bool",
        "exit 1 when the Lease is lost instead of campaigning again",
        "ours",
    ),
    _Flag("cluster-name", "cluster_name", "str", "cluster name passed to the cloud"),
    _Flag("cluster-cidr", "cluster_cidr", "str", "pod CIDRs, comma separated (routes, IPAM)"),
    _Flag(
        "allocate-node-cidrs",
        "allocate_node_cidrs",
        "bool",
        "allocate spec.podCIDRs to Nodes from --cluster-cidr",
    ),
    _Flag(
        "cidr-allocator-type",
        "cidr_allocator_type",
        "str",
        "CIDR allocator; only RangeAllocator",
    ),
    _Flag(
        "node-cidr-mask-size",
        "node_cidr_mask_size",
        "int",
        "pod CIDR prefix length per Node, single stack only; 0 = 24 (IPv4) or 64 (IPv6)",
    ),
    _Flag(
        "node-cidr-mask-size-ipv4",
        "node_cidr_mask_size_ipv4",
        "int",
        "IPv4 pod CIDR prefix length per Node; 0 = 24",
    ),
    _Flag(
        "node-cidr-mask-size-ipv6",
        "node_cidr_mask_size_ipv6",
        "int",
        "IPv6 pod CIDR prefix length per Node; 0 = 64",
    ),
    _Flag(
        "service-cluster-ip-range",
        "service_cluster_ip_range",
        "str",
        "Service CIDRs (up to one per family), kept out of pod CIDR allocation",
    ),
    _Flag(
        "configure-cloud-routes",
        "configure_cloud_routes",
        "bool",
        "program cloud routes for the Nodes' pod CIDRs",
    ),
    _Flag(
        "route-reconciliation-period",
        "route_reconciliation_period_s",
        "duration",
        "period of the route sync",
    ),
    _Flag(
        "node-monitor-period",
        "node_monitor_period_s",
        "duration",
        "period of the Node lifecycle check",
    ),
    _Flag(
        "concurrent-node-syncs",
        "concurrent_node_syncs",
        "int",
        "Nodes initialised at once",
        "upstream, our default",
    ),
    _Flag(
        "concurrent-node-status-updates",
        "concurrent_node_status_updates",
        "int",
        "Nodes address-synced at once; 0 = --concurrent-node-syncs",
    ),
    _Flag(
        "node-status-update-frequency",
        "node_status_update_frequency_s",
        "duration",
        "period of the Node address sync",
    ),
    _Flag(
        "concurrent-service-syncs",
        "concurrent_service_syncs",
        "int",
        "Services reconciled at once",
    ),
    _Flag(
        "min-resync-period",
        "min_resync_period_s",
        "duration",
        "informer resync period, randomised in [p, 2p)",
    ),
    _Flag(
        "controller-start-interval",
        "controller_start_interval_s",
        "duration",
        "pause between controller starts",
    ),
    _Flag("secure-port", "secure_port", "int", "port of /healthz, /metrics...; 0 = no server"),
    _Flag("bind-address", "bind_address", "ip", "address the secure port listens on"),
    _Flag("cert-dir", "cert_dir", "str", "accepted; the self-signed pair is kept in memory"),
    _Flag("tls-cert-file", "tls_cert_file", "str", "serving certificate (PEM)"),
    _Flag("tls-private-key-file", "tls_private_key_file", "str", "serving key (PEM)"),
    _Flag("plain-http", "plain_http", "bool", "serve the secure port without TLS", "ours"),
    _Flag("v", "verbosity", "int", "log verbosity: 0 = info, 1 or more = debug"),
    _Flag(
        "logging-format",
        "logging_format",
        "str",
        "text or json; empty = json off a TTY, text on one",
        "upstream, our default",
    ),
    _Flag(
        "cloud-api-rate",
        "cloud_rates",
        "rates",
        "cloud call budget per family (instances, load_balancers, routes); repeatable",
        "ours",
    ),
    _Flag(
        "cloud-batch-window",
        "cloud_batch_window_s",
        "duration",
        "how long per-Node cloud lookups wait to be batched",
        "ours",
    ),
    _Flag(
        "cloud-batch-size",
        "cloud_batch_size",
        "int",
        "most Nodes in one batched cloud lookup",
        "ours",
    ),
)

_IGNORED: Final = (
    _Ignored("kube-api-content-type", "str"),
    _Ignored("profiling", "bool"),
    _Ignored("contention-profiling", "bool"),
    _Ignored("feature-gates", "str"),
    _Ignored("use-service-account-credentials", "bool"),
    _Ignored("external-cloud-volume-plugin", "str"),
    _Ignored("allow-untagged-cloud", "bool"),
    _Ignored("node-sync-period", "duration"),
    _Ignored("enable-leader-migration", "bool"),
    _Ignored("leader-migration-config", "str"),
    _Ignored("authentication-kubeconfig", "str"),
    _Ignored("authentication-skip-lookup", "bool"),
    _Ignored("authentication-token-webhook-cache-ttl", "duration"),
    _Ignored("authentication-tolerate-lookup-failure", "bool"),
    _Ignored("authorization-kubeconfig", "str"),
    _Ignored("authorization-always-allow-paths", "strings"),
    _Ignored("authorization-webhook-cache-authorized-ttl", "duration"),
    _Ignored("authorization-webhook-cache-unauthorized-ttl", "duration"),
    _Ignored("client-ca-file", "str"),
    _Ignored("requestheader-client-ca-file", "str"),
    _Ignored("requestheader-allowed-names", "strings"),
    _Ignored("requestheader-username-headers", "strings"),
    _Ignored("requestheader-group-headers", "strings"),
    _Ignored("requestheader-extra-headers-prefix", "strings"),
    _Ignored("requestheader-uid-headers", "strings"),
    _Ignored("tls-cipher-suites", "strings"),
    _Ignored("tls-curve-preferences", "strings"),
    _Ignored("tls-min-version", "str"),
    _Ignored("tls-sni-cert-key", "str"),
    _Ignored("http2-max-streams-per-connection", "int"),
    _Ignored("disable-http2-serving", "bool"),
    _Ignored("permit-port-sharing", "bool"),
    _Ignored("permit-address-sharing", "bool"),
    _Ignored("vmodule", "str"),
    _Ignored("log-flush-frequency", "duration"),
    _Ignored("webhooks", "strings"),
    _Ignored("webhook-secure-port", "int"),
    _Ignored("webhook-bind-address", "ip"),
    _Ignored("webhook-cert-dir", "str"),
)

_BY_NAME: Final[Mapping[str, _Flag]] = MappingProxyType({spec.name: spec for spec in _FLAGS})
_IGNORED_BY_NAME: Final[Mapping[str, _Ignored]] = MappingProxyType(
    {spec.name: spec for spec in _IGNORED}
)
_KINDS: Final[Mapping[str, _Kind]] = MappingProxyType(
    {
        **{spec.name: spec.kind for spec in _FLAGS},
        **{spec.name: spec.kind for spec in _IGNORED},
        "help": "cli",
        "version": "cli",
    }
)
# A valid value of each kind, written by to_flags for the ignored flags that were given.
_NEUTRAL: Final[Mapping[str, str]] = MappingProxyType(
    {"str": "", "bool": "true", "int": "0", "duration": "0s", "ip": "127.0.0.1", "strings": ""}
)


# --- tokenizing argv the pflag way ---------------------------------------------------------


@dataclass(frozen=True)
class _Token:
    raw: str
    name: str | None  # None: a positional argument
    value: str | None  # after "=", glued to -v, or the next argument; None when absent
    # "short": -v or -h (named "v" and "help"); "bad": a single-dash long form like -kubeconfig
    form: Literal["long", "short", "bad"] = "long"


def _tokens(argv: Sequence[str]) -> Iterator[_Token]:
    """Split argv into flags and values without judging them (that is parse_flags' job)."""
    args = list(argv)
    i = 0
    while i < len(args):
        raw = args[i]
        i += 1
        if raw == "--":
            yield from (_Token(rest, None, None) for rest in args[i:])
            return
        form: Literal["long", "short", "bad"] = "long"
        if raw.startswith("--"):
            name, eq, value = raw[2:].partition("=")
            inline: str | None = value if eq else None
        elif raw.startswith("-v"):
            form, name, rest = "short", "v", raw[2:]
            inline = rest.removeprefix("=") if rest else None
        elif raw == "-h" or raw.startswith("-h="):
            form, name = "short", "help"
            inline = raw[3:] if raw.startswith("-h=") else None
        elif raw.startswith("-") and raw != "-":
            form = "bad"
            name, eq, value = raw[1:].partition("=")
            inline = value if eq else None
        else:
            yield _Token(raw, None, None)
            continue
        name = name.replace("_", "-")
        kind = _KINDS.get(name)
        takes_value = form != "bad" and kind is not None and kind not in _BOOL_LIKE
        if inline is None and takes_value and i < len(args):
            inline = args[i]
            i += 1
        yield _Token(raw, name, inline, form)


def _positional_message(raw: str, previous: _Token | None) -> str:
    if (
        previous is not None
        and previous.value is None
        and previous.name is not None
        and _KINDS.get(previous.name) == "bool"
        and raw.lower() in _BOOLS
    ):
        return (
            f"unexpected argument {raw!r}: a boolean flag takes its value after '=', "
            f"e.g. --{previous.name}={raw}"
        )
    return f"unexpected argument {raw!r}: trio-ccm takes flags only (see --help)"


def _single_dash_message(token: _Token) -> str:
    if token.name in _KINDS:
        return f"{token.raw}: long flags take two dashes, e.g. --{token.raw[1:]}"
    return f"unknown shorthand flag: {token.raw[1:2]!r} in {token.raw} (see --help)"


# --- values ------------------------------------------------------------------------------

_BOOLS: Final[Mapping[str, bool]] = MappingProxyType(
    {
        **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
        **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
    }
)
_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BARE_NUMBER_RE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_DURATION_PART_RE: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")
_NS_PER_UNIT: Final[Mapping[str, int]] = MappingProxyType(
    {
        "ns": 1,
        "us": 1_000,
        "\u00b5s": 1_000,  # micro sign, as Go accepts
        "\u03bcs": 1_000,  # Greek mu, as Go accepts
        "ms": 1_000_000,
        "s": 1_000_000_000,
        "m": 60_000_000_000,
        "h": 3_600_000_000_000,
    }
)
_MAX_NS: Final = 2**63 - 1  # Go's time.Duration is an int64 of nanoseconds
_CONTROLLER_TOKEN_RE: Final = re.compile(r"\*|-?[A-Za-z0-9][A-Za-z0-9_.-]*")
_RATE_RE: Final = re.compile(r"([^=]*)=([^:]*):(.*)")


def _parse_bool(text: str) -> bool | None:
    return _BOOLS.get(text)


def _convert(kind: _Kind, flag: str, value: str) -> object:
    """The typed value of `flag=value`; FlagError naming the flag when it does not parse."""
    if kind in ("bool", "cli"):
        parsed = _parse_bool(value)
        if parsed is None and not (flag == "--version" and value == "raw"):
            raise FlagError(f"{flag}={value}: not a boolean; write {flag}=true or {flag}=false")
        return parsed
    if kind == "int":
        if not _INT_RE.fullmatch(value):
            raise FlagError(f"{flag}={value}: not an integer")
        return int(value)
    if kind == "float":
        if not _FLOAT_RE.fullmatch(value):
            raise FlagError(f"{flag}={value}: not a number")
        return float(value)
    if kind == "duration":
        return _parse_duration(flag, value) / 1e9
    if kind == "ip":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise FlagError(f"{flag}={value}: not an IP address, e.g. 0.0.0.0 or ::") from None
        return value
    if kind == "controllers":
        # pflag's string slices: an empty value is an empty list.
        tokens = value.split(",") if value else []
        for token in tokens:
            if not _CONTROLLER_TOKEN_RE.fullmatch(token):
                raise FlagError(_controller_token_message(flag, value, token))
        return tokens
    if kind == "rates":
        return [_parse_rate(flag, value, item) for item in value.split(",")]
    return value  # "str", and "strings" of the ignored flags


def _parse_duration(flag: str, value: str) -> int:
    """Go's time.ParseDuration, to integer nanoseconds."""
    text = value
    sign = -1 if text.startswith("-") else 1
    text = text.removeprefix("-") if sign < 0 else text.removeprefix("+")
    if text == "0":
        return 0
    if _BARE_NUMBER_RE.fullmatch(value):
        raise FlagError(f"{flag}={value}: a duration needs a unit, e.g. {value}s")
    bad = FlagError(f"{flag}={value}: not a duration; write e.g. 15s, 1m30s or 500ms")
    total = Decimal(0)
    pos = 0
    while pos < len(text) or pos == 0:
        match = _DURATION_PART_RE.match(text, pos)
        assert match is not None  # both groups may be empty, so it always matches
        number, unit = match.groups()
        if number in ("", ".") or unit not in _NS_PER_UNIT:
            raise bad
        total += Decimal(number) * _NS_PER_UNIT[unit]
        pos = match.end()
    ns = int(total)  # Go truncates below a nanosecond
    if ns > _MAX_NS:
        raise FlagError(f"{flag}={value}: too long (Go durations end near 2562047h)")
    return sign * ns


def _parse_rate(flag: str, value: str, item: str) -> tuple[str, float, int]:
    match = _RATE_RE.fullmatch(item)
    if (
        match is None
        or not _FLOAT_RE.fullmatch(match.group(2))
        or not _INT_RE.fullmatch(match.group(3))
    ):
        raise FlagError(f"{flag}={value}: {item!r} is not FAMILY=QPS:BURST, e.g. instances=10:20")
    return match.group(1), float(match.group(2)), int(match.group(3))


def _controller_token_message(flag: str, value: str, token: str) -> str:
    if not token:
        return f"{flag}={value}: empty controller name; separate names with single commas"
    return (
        f"{flag}={value}: {token!r} is not '*', NAME or -NAME "
        "(no spaces; e.g. --controllers=*,-node-route-controller)"
    )


def _rewrite_alias(token: str, aliases: Mapping[str, str]) -> str:
    if token.startswith("-"):
        return "-" + aliases.get(token[1:], token[1:])
    return aliases.get(token, token)


def format_duration(seconds: float, *, micro: str = "us") -> str:
    """Go's Duration.String() form of `seconds` (nanosecond resolution). Go writes `µs`;
    flags take `us` too, and `--help` writes that (the default)."""
    ns = round(seconds * 1_000_000_000)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_decimal(ns, 1_000)}{micro}"
    if ns < 1_000_000_000:
        return f"{sign}{_decimal(ns, 1_000_000)}ms"
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = sign
    if hours:
        text += f"{hours}h"
    if hours or minutes:
        text += f"{minutes}m"
    return f"{text}{_decimal(rest, 1_000_000_000)}s"


def _decimal(count: int, unit: int) -> str:
    whole, part = divmod(count, unit)
    if not part:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{part:0{digits}d}".rstrip("0")


def _format_value(kind: _Kind, value: object) -> str:
    if kind == "bool":
        return "true" if value else "false"
    if kind == "duration":
        assert isinstance(value, float | int)
        return format_duration(value)
    if kind == "float":
        assert isinstance(value, float | int)
        return repr(float(value))
    if kind == "controllers":
        assert isinstance(value, tuple)
        return ",".join(value)
    if kind == "rates":
        assert isinstance(value, tuple)
        return ",".join(f"{family}={float(qps)!r}:{burst}" for family, qps, burst in value)
    return str(value)


def _flag_column(spec: _Flag) -> str:
    type_name = _TYPE_NAMES[spec.kind]
    suffix = f" {type_name}" if type_name else ""
    if spec.name == "v":
        return f"  -v, --v{suffix}"
    return f"      --{spec.name}{suffix}"


def _default_note(spec: _Flag) -> str:
    default = getattr(Settings(), spec.field)
    if spec.kind == "str":
        return f'(default "{default}")'
    if spec.kind == "rates":
        return "(default: none)"
    return f"(default {_format_value(spec.kind, default)})"


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


def _problems(s: Settings) -> list[str]:
    """Everything wrong with `s`, each naming its flag; empty when valid."""
    problems: list[str] = []
    flag_of = {spec.field: f"--{spec.name}" for spec in _FLAGS}

    def show(field: str) -> str:
        spec = _BY_NAME[flag_of[field].removeprefix("--")]
        return f"{flag_of[field]}={_format_value(spec.kind, getattr(s, field))}"

    for spec in _FLAGS:
        if spec.kind != "duration":
            continue
        seconds = getattr(s, spec.field)
        if not math.isfinite(seconds) or seconds < 0:
            problems.append(f"{show(spec.field)}: must be a duration of 0s or more")
        elif spec.field in _POSITIVE_PERIODS and seconds == 0:
            problems.append(f"{show(spec.field)}: a period must be more than 0s")
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
    if not (math.isfinite(s.kube_api_qps) and s.kube_api_qps > 0):
        problems.append(f"{show('kube_api_qps')}: must be more than 0")
    if s.kube_api_burst < 1:
        problems.append(f"{show('kube_api_burst')}: must be at least 1")
    for field in ("concurrent_node_syncs", "concurrent_service_syncs", "cloud_batch_size"):
        if getattr(s, field) < 1:
            problems.append(f"{show(field)}: must be at least 1")
    if s.concurrent_node_status_updates < 0:
        problems.append(
            f"{show('concurrent_node_status_updates')}: must be 0 "
            "(= --concurrent-node-syncs) or more"
        )
    if not 0 <= s.secure_port <= 65535:
        problems.append(f"{show('secure_port')}: must be 0 (no server) to 65535")
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
    if s.verbosity < 0:
        problems.append(f"{show('verbosity')}: must be 0 or more")
    if s.cidr_allocator_type != "RangeAllocator":
        problems.append(f"{show('cidr_allocator_type')}: only RangeAllocator is supported")
    problems += _cidr_problems(s.cluster_cidr)
    problems += _ipam_problems(s)
    problems += _controllers_problems(s.controllers)
    problems += _rate_problems(s.cloud_rates)
    problems += [
        f"ignored_flags: {name!r} is not a flag accepted for compatibility"
        for name in s.ignored_flags
        if not name.startswith("--") or name[2:] not in _IGNORED_BY_NAME
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
        _controller_token_message("--controllers", value, token)
        for token in controllers
        if not _CONTROLLER_TOKEN_RE.fullmatch(token)
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
        if not (math.isfinite(qps) and qps > 0):
            problems.append(f"{item}: QPS must be more than 0")
        if burst < 1:
            problems.append(f"{item}: burst must be at least 1")
    return problems
