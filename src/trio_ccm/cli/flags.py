"""The command line, the way the Go cloud-controller-manager reads it: flags -> Settings.

`parse_flags` reads argv with the rules of Go's pflag as the upstream binary registers its
flags: `--flag=value` or `--flag value`; booleans as `--flag` or `--flag=false` (never
`--flag false`); `_` and `-` are the same in names; `-v` is the only shorthand besides `-h`;
durations use Go syntax (`15s`, `1m30s`, `500ms`, `0`). Flags that upstream has and we do
not implement are accepted and recorded in `Settings.ignored_flags`, so existing manifests
keep working and the cli can say which ones had no effect. An unknown flag is refused with
the nearest known one suggested.

`--help`/`-h` and `--version` belong to the cli: it asks `wants_help` and `wants_version`
first, and `parse_flags` skips them. `usage()` is the `--help` text; `to_flags()` writes
Settings back as flags. The flag table below is the one place a flag is described.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import textwrap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal, Protocol

from trio_ccm.base.govalues import parse_bool, parse_duration
from trio_ccm.kube.wellknown import BUILTIN_CONTROLLER_NAMES, CONTROLLER_ALIASES
from trio_ccm.settings import (
    COMPATIBILITY_FLAGS,
    CONTROLLER_TOKEN_RE,
    FlagError,
    Settings,
    controller_token_message,
    flag_of,
    format_setting,
    rewrite_alias,
)

__all__ = ["parse_flags", "to_flags", "usage", "wants_help", "wants_version"]


class _Named(Protocol):
    """A controller class, as far as the command line cares: its `--controllers` name."""

    @property
    def name(self) -> str: ...


_USAGE_WIDTH: Final = 100


def parse_flags(
    argv: Sequence[str],
    *,
    controllers: Iterable[str | _Named] | None = (),
    controller_aliases: Mapping[str, str] = CONTROLLER_ALIASES,
) -> Settings:
    """Settings from a Go-style command line (argv without the program name).

    `--controllers` may name the built-in controllers, their aliases (`controller_aliases`,
    upstream's short names; tokens are rewritten to the canonical names) and the extra
    `controllers` (classes, as passed to `serve()`, or names); any other name is refused
    here, with the nearest known one suggested. `controllers=None` defers that check to
    `serve()`: for a caller that learns of extra controllers later (the cli, from the
    provider it builds from these flags). Raises FlagError naming the flag on any problem.
    `--help`, `-h` and `--version` are skipped: the cli checks `wants_help`/`wants_version`
    first.
    """
    values: dict[str, Any] = {}
    tokens_given: list[str] | None = None
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
            raise FlagError(_unknown_flag_message(flag, token.name))
        if kind in _BOOL_LIKE:
            value = token.value if token.value is not None else "true"
        elif token.value is None:
            raise FlagError(f"{flag}: the flag needs a value, e.g. {flag}=VALUE")
        else:
            value = token.value
        converted = _convert(kind, flag, value)
        if token.name in COMPATIBILITY_FLAGS:
            if f"--{token.name}" not in ignored:
                ignored.append(f"--{token.name}")
        elif kind == "cli":
            continue
        elif kind == "controllers":
            assert isinstance(converted, list)
            tokens = [rewrite_alias(t, controller_aliases) for t in converted]
            tokens_given = tokens if tokens_given is None else [*tokens_given, *tokens]
        elif kind == "rates":
            assert isinstance(converted, list)
            rates.extend(converted)
        else:
            values[_BY_NAME[token.name].field] = converted
    if tokens_given is not None:
        values["controllers"] = tuple(tokens_given)
    settings = Settings(**values, cloud_rates=tuple(rates), ignored_flags=tuple(ignored))
    if controllers is not None:
        extra = [c if isinstance(c, str) else c.name for c in controllers]
        settings.enabled_controllers(
            [*dict.fromkeys([*BUILTIN_CONTROLLER_NAMES, *extra])], controller_aliases
        )
    return settings


def to_flags(settings: Settings) -> list[str]:
    """The settings that differ from the defaults, as `--flag=value` for `parse_flags`."""
    defaults = Settings()
    flags = []
    for spec in _FLAGS:
        value = getattr(settings, spec.field)
        if value != getattr(defaults, spec.field):
            flags.append(f"--{spec.name}={format_setting(spec.field, value)}")
    for name in settings.ignored_flags:
        flags.append(f"{name}={_NEUTRAL[COMPATIBILITY_FLAGS[name.removeprefix('--')]]}")
    return flags


def wants_help(argv: Sequence[str]) -> bool:
    """Whether the command line asks for help (`--help`, `-h`, `--help=true`)."""
    return any(
        token.name == "help"
        and token.form != "bad"
        and (token.value is None or parse_bool(token.value))
        for token in _tokens(argv)
    )


def wants_version(argv: Sequence[str]) -> bool:
    """Whether the command line asks for the version (`--version`, `--version=true|raw`)."""
    return any(
        token.name == "version"
        and token.form != "bad"
        and (token.value is None or token.value == "raw" or parse_bool(token.value))
        for token in _tokens(argv)
    )


def usage(*, providers: Sequence[str] = ()) -> str:
    """The `--help` text: every effective flag with its default and meaning, and the
    installed `providers` (the cli asks the registry) beside `--cloud-provider`."""
    installed = f" (installed: {', '.join(providers) or 'none'})"
    rows = [
        (
            _flag_column(spec),
            f"{spec.meaning} {_default_note(spec)}{_ORIGIN_NOTES[spec.origin]}"
            + (installed if spec.field == "cloud_provider" else ""),
        )
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
    ignored = ", ".join(f"--{name}" for name in COMPATIBILITY_FLAGS)
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
_IGNORED_KINDS: Final[Mapping[str, _Kind]] = MappingProxyType(
    {
        "str": "str",
        "bool": "bool",
        "int": "int",
        "duration": "duration",
        "ip": "ip",
        "strings": "strings",
    }
)
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
    field: str
    kind: _Kind
    meaning: str
    origin: Literal["upstream", "ours", "upstream, our default"] = "upstream"

    @property
    def name(self) -> str:
        """The flag's name without dashes (`settings.flag_of` is the one rule)."""
        return flag_of(self.field).removeprefix("--")


_FLAGS: Final = (
    _Flag("cloud_provider", "str", "cloud provider name, e.g. sim; required"),
    _Flag("cloud_config", "str", "path of the cloud provider's config file"),
    _Flag("kubeconfig", "str", "kubeconfig path; empty = in-cluster config"),
    _Flag("master", "str", "API server URL; overrides the kubeconfig's server"),
    _Flag("kube_api_qps", "float", "client-side QPS to the API server"),
    _Flag("kube_api_burst", "int", "client-side burst to the API server"),
    _Flag(
        "controllers",
        "controllers",
        "controllers to run: * = all on by default, NAME on, -NAME off",
    ),
    _Flag("leader_elect", "bool", "campaign for the Lease before acting"),
    _Flag(
        "leader_elect_lease_duration_s",
        "duration",
        "how long a standby waits before taking over an unrenewed Lease",
    ),
    _Flag(
        "leader_elect_renew_deadline_s",
        "duration",
        "how long the leader retries renewing before it stops acting",
    ),
    _Flag(
        "leader_elect_retry_period_s",
        "duration",
        "pause between acquire/renew attempts",
    ),
    _Flag(
        "leader_elect_resource_lock",
        "str",
        "lock kind; only leases",
    ),
    _Flag(
        "leader_elect_resource_name",
        "str",
        "name of the Lease",
    ),
    _Flag(
        "leader_elect_resource_namespace",
        "str",
        "namespace of the Lease",
    ),
    _Flag(
        "exit_on_lost_lease",
        "bool",
        "exit 1 when the Lease is lost instead of campaigning again",
        "ours",
    ),
    _Flag("cluster_name", "str", "cluster name passed to the cloud"),
    _Flag("cluster_cidr", "str", "pod CIDRs, comma separated (routes, IPAM)"),
    _Flag(
        "allocate_node_cidrs",
        "bool",
        "allocate spec.podCIDRs to Nodes from --cluster-cidr",
    ),
    _Flag(
        "cidr_allocator_type",
        "str",
        "CIDR allocator; only RangeAllocator",
    ),
    _Flag(
        "node_cidr_mask_size",
        "int",
        "pod CIDR prefix length per Node, single stack only; 0 = 24 (IPv4) or 64 (IPv6)",
    ),
    _Flag(
        "node_cidr_mask_size_ipv4",
        "int",
        "IPv4 pod CIDR prefix length per Node; 0 = 24",
    ),
    _Flag(
        "node_cidr_mask_size_ipv6",
        "int",
        "IPv6 pod CIDR prefix length per Node; 0 = 64",
    ),
    _Flag(
        "service_cluster_ip_range",
        "str",
        "Service CIDRs (up to one per family), kept out of pod CIDR allocation",
    ),
    _Flag(
        "configure_cloud_routes",
        "bool",
        "program cloud routes for the Nodes' pod CIDRs",
    ),
    _Flag(
        "route_reconciliation_period_s",
        "duration",
        "period of the route sync",
    ),
    _Flag(
        "node_monitor_period_s",
        "duration",
        "period of the Node lifecycle check",
    ),
    _Flag(
        "concurrent_node_syncs",
        "int",
        "Nodes initialised at once",
        "upstream, our default",
    ),
    _Flag(
        "concurrent_node_status_updates",
        "int",
        "Nodes address-synced at once; 0 = --concurrent-node-syncs",
    ),
    _Flag(
        "node_status_update_frequency_s",
        "duration",
        "period of the Node address sync",
    ),
    _Flag(
        "concurrent_service_syncs",
        "int",
        "Services reconciled at once",
    ),
    _Flag(
        "min_resync_period_s",
        "duration",
        "informer resync period, randomised in [p, 2p)",
    ),
    _Flag(
        "controller_start_interval_s",
        "duration",
        "pause between controller starts",
    ),
    _Flag("secure_port", "int", "port of /healthz, /metrics...; 0 = no server"),
    _Flag("bind_address", "ip", "address the secure port listens on"),
    _Flag("cert_dir", "str", "accepted; the self-signed pair is kept in memory"),
    _Flag("tls_cert_file", "str", "serving certificate (PEM)"),
    _Flag("tls_private_key_file", "str", "serving key (PEM)"),
    _Flag("plain_http", "bool", "serve the secure port without TLS", "ours"),
    _Flag("verbosity", "int", "log verbosity: 0 = info, 1 or more = debug"),
    _Flag(
        "logging_format",
        "str",
        "text or json; empty = json off a TTY, text on one",
        "upstream, our default",
    ),
    _Flag(
        "cloud_rates",
        "rates",
        "cloud call budget per family (instances, load_balancers, routes); repeatable",
        "ours",
    ),
    _Flag(
        "cloud_batch_window_s",
        "duration",
        "how long per-Node cloud lookups wait to be batched",
        "ours",
    ),
    _Flag(
        "cloud_batch_size",
        "int",
        "most Nodes in one batched cloud lookup",
        "ours",
    ),
    _Flag(
        "load_balancer_sweep_period_s",
        "duration",
        "how often load balancers the provider made are checked for leaks (Services gone, "
        "recreated or retyped); 0s: never",
        "ours",
    ),
    _Flag(
        "delete_leaked_load_balancers",
        "bool",
        "delete a leaked load balancer once it has been leaked for the grace period; "
        "otherwise leaks are only reported",
        "ours",
    ),
    _Flag(
        "leaked_load_balancer_grace_s",
        "duration",
        "how long a load balancer must be seen leaked before it is deleted",
        "ours",
    ),
)

_BY_NAME: Final[Mapping[str, _Flag]] = MappingProxyType({spec.name: spec for spec in _FLAGS})
_KINDS: Final[Mapping[str, _Kind]] = MappingProxyType(
    {
        **{spec.name: spec.kind for spec in _FLAGS},
        **{name: _IGNORED_KINDS[kind] for name, kind in COMPATIBILITY_FLAGS.items()},
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
        and parse_bool(raw.lower()) is not None
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

_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_RATE_RE: Final = re.compile(r"([^=]*)=([^:]*):(.*)")


def _convert(kind: _Kind, flag: str, value: str) -> object:
    """The typed value of `flag=value`; FlagError naming the flag when it does not parse."""
    if kind in ("bool", "cli"):
        parsed = parse_bool(value)
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
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise FlagError(f"{flag}={value}: {exc}") from None
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
            if not CONTROLLER_TOKEN_RE.fullmatch(token):
                raise FlagError(controller_token_message(flag, value, token))
        return tokens
    if kind == "rates":
        return [_parse_rate(flag, value, item) for item in value.split(",")]
    return value  # "str", and "strings" of the ignored flags


def _parse_rate(flag: str, value: str, item: str) -> tuple[str, float, int]:
    match = _RATE_RE.fullmatch(item)
    if (
        match is None
        or not _FLOAT_RE.fullmatch(match.group(2))
        or not _INT_RE.fullmatch(match.group(3))
    ):
        raise FlagError(f"{flag}={value}: {item!r} is not FAMILY=QPS:BURST, e.g. instances=10:20")
    return match.group(1), float(match.group(2)), int(match.group(3))


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
    return f"(default {format_setting(spec.field, default)})"


def _unknown_flag_message(flag: str, name: str) -> str:
    """Go's "unknown flag", with the nearest known flag suggested when there is one."""
    known = [n for n in _KINDS if n not in ("help", "version")]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    hint = f"; did you mean --{close[0]}?" if close else ""
    return f"unknown flag: {flag}{hint} (see --help)"
