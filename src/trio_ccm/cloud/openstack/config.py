"""OCCM's cloud.conf, so an existing openstack-cloud-controller-manager file works unchanged.

A gcfg INI file (`cloud/gcfg.py`): section and key names case-insensitive, `;`/`#`
comments, quoted values, a bool key alone means true, a repeated key appends for the
multi-valued keys (`public-network-name`, `internal-network-name`) and overrides otherwise.

Sections and keys (docs/openstack.md has each one's meaning):

- [Global]: auth-url; username or user-id; password; tenant-id / tenant-name (also spelled
  project-id / project-name); tenant-domain-id / -name (project-domain-*); domain-id /
  -name; user-domain-id / -name; application-credential-id / -name / -secret; region;
  os-endpoint-type; ca-file; cert-file + key-file; tls-insecure; use-clouds, clouds-file,
  cloud.
- [Networking]: ipv6-support-disabled; public-network-name and internal-network-name
  (repeatable); address-sort-order.
- [Route]: router-id.
- [Metadata]: search-order (validated as OCCM does: at most configDrive,metadataService;
  neither is read); request-timeout (a Go duration, unit required; default 60s).
- [LoadBalancer], [LoadBalancerClass "name"]: handed raw to the load-balancer part
  (`CloudConfig.load_balancer`, `load_balancer_classes`), which checks their keys.
- [BlockStorage]: cinder-csi-plugin's, in a file shared with it: accepted, not read (a
  warning).

Differences from OCCM, on purpose: an unknown section or key, or a value that cannot mean
anything, exits naming the file, the line, the key and the fix (OCCM ignores it, so a typo
such as `project-domian-name` silently authenticates differently). `trust-id`,
`trustee-id`, `trustee-password` and `token` are refused with the fix (use an application
credential). `use-clouds=true` reads clouds.yaml (`clouds-file`, else
`OS_CLIENT_CONFIG_FILE`, else ./clouds.yaml, ~/.config/openstack/clouds.yaml,
/etc/openstack/clouds.yaml; the cloud is `cloud`, else `OS_CLOUD`); keys set in [Global]
win, as in OCCM.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final

import yaml

from trio_ccm.cloud.gcfg import BOOLS, assignment, logical_lines, value
from trio_ccm.cloud.openstack.client import DEFAULT_TIMEOUT_S, Credentials
from trio_ccm.errors import ConfigError

__all__ = [
    "CloudConfig",
    "RawSection",
    "parse_cloud_config",
    "parse_duration_s",
    "resolve_clouds_yaml",
]

_SECTION: Final = re.compile(
    r'^\[\s*([A-Za-z][A-Za-z0-9-.]*)\s*(?:"((?:[^"\\]|\\.)*)")?\s*\]\s*(?:[;#].*)?$'
)
_SEARCH_ORDER: Final = ("configDrive", "metadataService")


@dataclass(frozen=True, slots=True)
class RawSection:
    """A section handed to another part unread: key (lower case) -> values in file order,
    and the line each key was last set on (for errors naming the line)."""

    name: str
    values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    source: str = "cloud.conf"

    def get(self, key: str, default: str = "") -> str:
        """The last value of `key` (gcfg: a repeated single-valued key overrides)."""
        found = self.values.get(key.lower())
        return found[-1] if found else default

    def where(self, key: str) -> str:
        line = self.lines.get(key.lower())
        return f"{self.source} line {line}" if line else self.source


@dataclass(frozen=True, slots=True)
class CloudConfig:
    """The parsed cloud.conf (see the module docstring for the keys)."""

    auth_url: str = ""
    username: str = ""
    user_id: str = ""
    password: str = field(default="", repr=False)
    project_id: str = ""
    project_name: str = ""
    project_domain_id: str = ""
    project_domain_name: str = ""
    domain_id: str = ""
    domain_name: str = ""
    user_domain_id: str = ""
    user_domain_name: str = ""
    application_credential_id: str = ""
    application_credential_name: str = ""
    application_credential_secret: str = field(default="", repr=False)
    region: str = ""
    os_endpoint_type: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    tls_insecure: bool = False
    use_clouds: bool = False
    clouds_file: str = ""
    cloud: str = ""
    # [Networking]
    ipv6_support_disabled: bool = False
    public_network_names: tuple[str, ...] = ()
    internal_network_names: tuple[str, ...] = ()
    address_sort_order: tuple[str, ...] = ()
    # [Route]
    router_id: str = ""
    # [Metadata]
    search_order: tuple[str, ...] = _SEARCH_ORDER
    request_timeout_s: float = DEFAULT_TIMEOUT_S
    # [LoadBalancer] and [LoadBalancerClass "x"], for the load-balancer part
    load_balancer: RawSection = field(default_factory=lambda: RawSection("LoadBalancer"))
    load_balancer_classes: Mapping[str, RawSection] = field(default_factory=dict)
    source: str = "cloud.conf"
    warnings: tuple[str, ...] = ()

    def credentials(self) -> Credentials:
        """The Keystone credentials these settings name."""
        return Credentials(
            auth_url=self.auth_url,
            username=self.username,
            user_id=self.user_id,
            password=self.password,
            user_domain_name=self.user_domain_name,
            user_domain_id=self.user_domain_id,
            project_name=self.project_name,
            project_id=self.project_id,
            project_domain_name=self.project_domain_name,
            project_domain_id=self.project_domain_id,
            domain_name=self.domain_name,
            domain_id=self.domain_id,
            application_credential_id=self.application_credential_id,
            application_credential_name=self.application_credential_name,
            application_credential_secret=self.application_credential_secret,
        )


# [Global] key -> field; the tenant-* and project-* spellings name one field.
_GLOBAL: Final = {
    "auth-url": "auth_url",
    "username": "username",
    "user-name": "username",
    "user-id": "user_id",
    "password": "password",
    "tenant-id": "project_id",
    "project-id": "project_id",
    "tenant-name": "project_name",
    "project-name": "project_name",
    "tenant-domain-id": "project_domain_id",
    "project-domain-id": "project_domain_id",
    "tenant-domain-name": "project_domain_name",
    "project-domain-name": "project_domain_name",
    "domain-id": "domain_id",
    "domain-name": "domain_name",
    "user-domain-id": "user_domain_id",
    "user-domain-name": "user_domain_name",
    "application-credential-id": "application_credential_id",
    "application-credential-name": "application_credential_name",
    "application-credential-secret": "application_credential_secret",
    "region": "region",
    "os-endpoint-type": "os_endpoint_type",
    "ca-file": "ca_file",
    "cert-file": "cert_file",
    "key-file": "key_file",
    "tls-insecure": "tls_insecure",
    "use-clouds": "use_clouds",
    "clouds-file": "clouds_file",
    "cloud": "cloud",
}
_REFUSED_GLOBAL: Final = {
    "trust-id": "trust authentication is not supported; create an application credential "
    "for the CCM (docs/openstack.md#application-credentials) and set "
    "application-credential-id and application-credential-secret",
    "trustee-id": "trust authentication is not supported; use an application credential",
    "trustee-password": "trust authentication is not supported; use an application credential",
    "token": "a pre-issued token expires and cannot be renewed; use a password or an "
    "application credential",
}
_NETWORKING: Final = {
    "ipv6-support-disabled": "ipv6_support_disabled",
    "public-network-name": "public_network_names",
    "internal-network-name": "internal_network_names",
    "address-sort-order": "address_sort_order",
}
_BOOL_FIELDS: Final = frozenset({"tls_insecure", "use_clouds", "ipv6_support_disabled"})
_MULTI_FIELDS: Final = frozenset({"public_network_names", "internal_network_names"})
_ENDPOINT_TYPES: Final = frozenset(
    {"public", "internal", "admin", "publicURL", "internalURL", "adminURL"}
)
_DURATION: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_s(text: str) -> float:
    """A Go duration ("60s", "1m30s", "500ms") in seconds; ValueError when it is none."""
    text = text.strip()
    if text in ("0", "+0", "-0"):
        return 0.0
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if not body:
        raise ValueError(text)
    total = 0.0
    position = 0
    for match in _DURATION.finditer(body):
        if match.start() != position:
            raise ValueError(text)
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(body):
        raise ValueError(text)
    return sign * total


def parse_cloud_config(data: bytes | str, *, source: str = "cloud.conf") -> CloudConfig:
    """The CloudConfig in `data`; ConfigError naming `source`, the line, the key and the fix.

    clouds.yaml is not read here (`resolve_clouds_yaml` does, with `use-clouds`)."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source}: not UTF-8 text ({exc}); save the file as UTF-8") from exc
    else:
        text = data
    text = text.removeprefix("\ufeff")
    values: dict[str, Any] = {}
    multi: dict[str, list[str]] = {}
    lb = RawSection("LoadBalancer", {}, {}, source)
    classes: dict[str, RawSection] = {}
    warnings: list[str] = []
    section = ""
    raw: RawSection | None = None
    for line in logical_lines(text):
        where = f"{source} line {line.number}"
        stripped = line.text.strip()
        if not stripped or stripped[0] in ";#":
            continue
        if stripped.startswith("["):
            section, raw = _section(stripped, where, lb, classes, source, warnings)
            continue
        if not section:
            raise ConfigError(
                f"{where}: {stripped!r} comes before any section; put it under [Global]"
            )
        name, has_value, rest = assignment(stripped, where)
        key = name.lower()
        if section == "blockstorage":
            continue
        if raw is not None:
            item = value(rest, where) if has_value else "true"
            raw.values[key] = (*raw.values.get(key, ()), item)
            raw.lines[key] = line.number
            continue
        got = value(rest, where) if has_value else None
        _key(section, key, name, got, where, values, multi)
    for name, items in multi.items():
        values[name] = tuple(items)
    config = CloudConfig(
        **values,
        load_balancer=lb,
        load_balancer_classes=classes,
        source=source,
        warnings=tuple(warnings),
    )
    _check(config)
    return config


def _section(
    text: str,
    where: str,
    lb: RawSection,
    classes: dict[str, RawSection],
    source: str,
    warnings: list[str],
) -> tuple[str, RawSection | None]:
    found = _SECTION.match(text)
    if found is None:
        raise ConfigError(f"{where}: {text!r} is no section header; write e.g. [Global]")
    name, sub = found.group(1).lower(), found.group(2)
    if name in ("global", "networking", "route", "metadata") and sub is None:
        return name, None
    if name == "loadbalancer" and sub is None:
        return name, lb
    if name == "loadbalancerclass" and sub:
        sub = value(f'"{sub}"', where)
        return name, classes.setdefault(
            sub, RawSection(f'LoadBalancerClass "{sub}"', {}, {}, source)
        )
    if name == "loadbalancerclass":
        raise ConfigError(
            f'{where}: [LoadBalancerClass] needs a name, e.g. [LoadBalancerClass "internet"]'
        )
    if name == "blockstorage" and sub is None:
        warnings.append(
            f"{where}: [BlockStorage] is cinder-csi-plugin's section (a file shared with it); "
            "trio-ccm does not read it"
        )
        return name, None
    raise ConfigError(
        f"{where}: unknown section [{found.group(1)}]; OCCM's sections are [Global], "
        '[Networking], [LoadBalancer], [LoadBalancerClass "name"], [Route], [Metadata] '
        "(and cinder-csi's [BlockStorage]): fix the name or delete the section"
    )


def _key(
    section: str,
    key: str,
    name: str,
    got: str | None,
    where: str,
    values: dict[str, Any],
    multi: dict[str, list[str]],
) -> None:
    if section == "global":
        if key in _REFUSED_GLOBAL:
            raise ConfigError(f"{where}: [Global] {name}: {_REFUSED_GLOBAL[key]}")
        target = _GLOBAL.get(key)
        known = ", ".join(sorted(_GLOBAL))
    elif section == "networking":
        target = _NETWORKING.get(key)
        known = ", ".join(sorted(_NETWORKING))
    elif section == "route":
        target = "router_id" if key == "router-id" else None
        known = "router-id"
    else:  # metadata
        target = {"search-order": "search_order", "request-timeout": "request_timeout_s"}.get(key)
        known = "search-order, request-timeout"
    if target is None:
        raise ConfigError(
            f"{where}: [{section.capitalize()}] has no key {name!r} (OCCM would ignore it "
            f"silently; trio-ccm refuses it): the keys are {known}; fix the spelling or "
            "delete the line"
        )
    if target in _BOOL_FIELDS:
        if got is None:
            values[target] = True
            return
        parsed = BOOLS.get(got.strip().lower())
        if parsed is None:
            raise ConfigError(f"{where}: {name} = {got!r} is no bool; write true or false")
        values[target] = parsed
        return
    if got is None:
        raise ConfigError(f"{where}: {name} needs a value: write {name} = <value>")
    got = got.strip()
    if target in _MULTI_FIELDS:
        multi.setdefault(target, []).append(got)
    elif target == "address_sort_order":
        cidrs = tuple(item.strip() for item in got.split(",") if item.strip())
        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ConfigError(
                    f"{where}: address-sort-order: {cidr!r} is no CIDR; write a comma-separated "
                    "list such as 10.0.0.0/8, 2001:db8::/32 (OCCM warns and skips it)"
                ) from None
        values[target] = cidrs
    elif target == "search_order":
        items = tuple(item.strip() for item in got.split(",") if item.strip())
        if not items or len(items) > 2 or any(item not in _SEARCH_ORDER for item in items):
            raise ConfigError(
                f"{where}: search-order = {got!r}: write at most two of configDrive, "
                "metadataService, comma-separated (as OCCM requires)"
            )
        values[target] = items
    elif target == "request_timeout_s":
        try:
            seconds = parse_duration_s(got)
        except ValueError:
            raise ConfigError(
                f"{where}: request-timeout = {got!r} is no duration: write it with its unit, "
                "e.g. 60s or 2m (a Go duration, as OCCM reads it)"
            ) from None
        if seconds < 0:
            raise ConfigError(f"{where}: request-timeout = {got!r} is negative; write e.g. 60s")
        values[target] = seconds or DEFAULT_TIMEOUT_S  # Go's 0 means "no timeout": keep ours
    elif target == "os_endpoint_type":
        if got not in _ENDPOINT_TYPES:
            raise ConfigError(
                f"{where}: os-endpoint-type = {got!r}: write public, internal or admin"
            )
        values[target] = got
    else:
        values[target] = got


def _check(config: CloudConfig) -> None:
    if bool(config.cert_file) != bool(config.key_file):
        raise ConfigError(
            f"{config.source}: [Global] cert-file and key-file go together (a TLS client "
            "certificate and its key): set both or neither"
        )
    if config.use_clouds:
        return
    problems = config.credentials().problems()
    if problems:
        raise ConfigError(
            f"{config.source}: [Global]: " + "; ".join(problems) + " (or set use-clouds = true "
            "to read clouds.yaml)"
        )


# -- clouds.yaml --------------------------------------------------------------------------
_CLOUDS_AUTH: Final = {
    "auth_url": "auth_url",
    "username": "username",
    "user_id": "user_id",
    "password": "password",
    "project_id": "project_id",
    "tenant_id": "project_id",
    "project_name": "project_name",
    "tenant_name": "project_name",
    "project_domain_id": "project_domain_id",
    "project_domain_name": "project_domain_name",
    "user_domain_id": "user_domain_id",
    "user_domain_name": "user_domain_name",
    "domain_id": "domain_id",
    "domain_name": "domain_name",
    "application_credential_id": "application_credential_id",
    "application_credential_name": "application_credential_name",
    "application_credential_secret": "application_credential_secret",
}


def resolve_clouds_yaml(
    config: CloudConfig, *, environ: Mapping[str, str] | None = None
) -> CloudConfig:
    """With `use-clouds`, the settings filled in from clouds.yaml ([Global] values win)."""
    if not config.use_clouds:
        return config
    env = os.environ if environ is None else environ
    candidates = (
        [config.clouds_file]
        if config.clouds_file
        else [
            env.get("OS_CLIENT_CONFIG_FILE", ""),
            "clouds.yaml",
            str(Path("~/.config/openstack/clouds.yaml").expanduser()),
            "/etc/openstack/clouds.yaml",
        ]
    )
    path = next((Path(c) for c in candidates if c and Path(c).is_file()), None)
    where = f"{config.source}: [Global] use-clouds"
    if path is None:
        raise ConfigError(
            f"{where}: no clouds.yaml found (looked at {', '.join(c for c in candidates if c)}); "
            "set clouds-file to its path"
        )
    try:
        loaded = yaml.safe_load(path.read_text("utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc}") from exc
    clouds = loaded.get("clouds") if isinstance(loaded, Mapping) else None
    name = config.cloud or env.get("OS_CLOUD", "")
    if not isinstance(clouds, Mapping) or not name or not isinstance(clouds.get(name), Mapping):
        offered = ", ".join(sorted(clouds)) if isinstance(clouds, Mapping) else "none"
        raise ConfigError(
            f"{where}: {path} has no cloud {name or '(none named)'!r} (clouds: {offered}); set "
            "[Global] cloud to one of them"
        )
    entry: Mapping[str, Any] = clouds[name]
    auth: Mapping[str, Any] = entry["auth"] if isinstance(entry.get("auth"), Mapping) else {}
    found: dict[str, Any] = {}
    for key, target in _CLOUDS_AUTH.items():
        item = auth.get(key)
        if isinstance(item, str | int) and str(item):
            found.setdefault(target, str(item))
    if isinstance(entry.get("region_name"), str):
        found["region"] = entry["region_name"]
    if isinstance(entry.get("interface"), str):
        found["os_endpoint_type"] = entry["interface"]
    if isinstance(entry.get("cacert"), str):
        found["ca_file"] = entry["cacert"]
    if entry.get("verify") is False:
        found["tls_insecure"] = True
    # [Global] wins: only empty fields take the clouds.yaml value (OCCM's replaceEmpty).
    changes = {
        f.name: found[f.name]
        for f in fields(CloudConfig)
        if f.name in found and not getattr(config, f.name)
    }
    merged = replace(config, **changes)
    problems = merged.credentials().problems()
    if problems:
        raise ConfigError(
            f"{where}: cloud {name!r} in {path} with [Global]: " + "; ".join(problems)
        )
    return merged
