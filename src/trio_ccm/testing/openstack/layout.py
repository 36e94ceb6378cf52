"""Where a world lives: its ports, its folders, its passwords.

Every port is configurable; by default all differ from OpenStack's and the databases'
standard ones (a world runs beside a developer's OpenStack on the standard ports). `Ports`
gives the services' own ports (the "backends") and, for each service in the catalog, the
port of the fault proxy in front of it, which is the address the catalog's `public`
endpoints (the ones a CCM uses) name.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Final

__all__ = [
    "CATALOG",
    "DEFAULT_PORT_BASE",
    "Layout",
    "Ports",
    "cache_dir",
    "check_loopback",
    "is_loopback",
]

DEFAULT_PORT_BASE: Final = 21000
"""`Ports.from_base`'s default: services on 21000-21009, proxies on 21010-21015 (below the
ephemeral range, away from every standard port)."""

CATALOG: Final = (
    # (service type, service name, path of the versioned endpoint)
    ("identity", "keystone", "/v3"),
    ("image", "glance", ""),
    ("placement", "placement", ""),
    ("compute", "nova", "/v2.1"),
    ("network", "neutron", ""),
    ("load-balancer", "octavia", ""),
)
"""The services the Keystone catalog lists, in `Ports`' order."""


def is_loopback(address: str) -> bool:
    """`address` is in 127.0.0.0/8 or is ::1 (an IPv4-mapped loopback address counts)."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return parsed.ipv4_mapped.is_loopback
    return parsed.is_loopback


def check_loopback(host: str) -> str:
    """`host` if it is a loopback address (127.0.0.0/8 or ::1); else ValueError."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"host {host!r}: the OpenStack test world runs on a loopback address "
            "(127.0.0.0/8 or ::1) only; give one"
        ) from None
    if not address.is_loopback:
        raise ValueError(
            f"host {host!r} is not a loopback address: the OpenStack test world sends "
            "traffic to 127.0.0.0/8 or ::1 only"
        )
    return host


@dataclass(frozen=True)
class Ports:
    """The world's TCP ports (module docstring). `proxy_*` are the fault proxy's."""

    keystone: int
    glance: int
    placement: int
    nova: int
    neutron: int
    octavia: int
    mariadb: int
    amqp: int
    epmd: int
    erlang_dist: int
    proxy_keystone: int
    proxy_glance: int
    proxy_placement: int
    proxy_nova: int
    proxy_neutron: int
    proxy_octavia: int

    @classmethod
    def from_base(cls, base: int = DEFAULT_PORT_BASE, **overrides: int) -> Ports:
        """Services on `base`..`base+9`, proxies on `base+10`..`base+15`, then `overrides`."""
        names = [item.name for item in fields(cls)]
        ports = cls(
            **{name: base + offset for offset, name in enumerate(names[:10])},
            **{name: base + 10 + offset for offset, name in enumerate(names[10:])},
        )
        unknown = set(overrides) - set(names)
        if unknown:
            raise ValueError(f"unknown port names {sorted(unknown)}: known are {names}")
        return replace(ports, **overrides)

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> Ports:
        """`from_base` with `TRIO_CCM_OPENSTACK_PORT_BASE` and any `TRIO_CCM_OPENSTACK_PORT_<NAME>`
        (e.g. `..._PORT_KEYSTONE=5001`) of the environment."""
        env = os.environ if environ is None else environ
        prefix = "TRIO_CCM_OPENSTACK_PORT_"
        base = int(env.get(prefix + "BASE", DEFAULT_PORT_BASE))
        names = {item.name for item in fields(cls)}
        overrides = {
            key[len(prefix) :].lower(): int(value)
            for key, value in env.items()
            if key.startswith(prefix) and key[len(prefix) :].lower() in names
        }
        return cls.from_base(base, **overrides)

    def backend(self, service_type: str) -> int:
        """The port of the service of catalog type `service_type`."""
        name = _SERVICE_NAMES[service_type]
        port: int = getattr(self, name)
        return port

    def proxy(self, service_type: str) -> int:
        """The fault proxy's port in front of the service of type `service_type`."""
        port: int = getattr(self, "proxy_" + _SERVICE_NAMES[service_type])
        return port

    def all(self) -> dict[str, int]:
        return {item.name: getattr(self, item.name) for item in fields(self)}


_SERVICE_NAMES: Final = {kind: name for kind, name, _ in CATALOG}


def cache_dir() -> Path:
    """`TRIO_CCM_CACHE_DIR`, else `$XDG_CACHE_HOME/trio-ccm`, else `~/.cache/trio-ccm`: the
    database dumps (and the default world folders) live under it, outside the repository."""
    explicit = os.environ.get("TRIO_CCM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "trio-ccm"


@dataclass(frozen=True)
class Layout:
    """The folders of one world under `root`, and its host and ports."""

    root: Path
    ports: Ports = field(default_factory=Ports.from_base)
    host: str = "127.0.0.1"
    password: str = "trio-ccm-world"  # noqa: S105 - a loopback test world's shared secret
    region: str = "RegionOne"

    def __post_init__(self) -> None:
        check_loopback(self.host)

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def plugins(self) -> Path:
        return self.root / "plugins"

    @property
    def mysql_socket(self) -> Path:
        return self.run / "mysql.sock"

    def url(self, port: int, path: str = "") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}{path}"

    def backend_url(self, service_type: str) -> str:
        """The service's own URL (the catalog's `internal` and `admin` endpoints)."""
        return self.url(self.ports.backend(service_type), _PATHS[service_type])

    def public_url(self, service_type: str) -> str:
        """The fault proxy's URL for the service (the catalog's `public` endpoint)."""
        return self.url(self.ports.proxy(service_type), _PATHS[service_type])

    def database_url(self, name: str) -> str:
        return (
            f"mysql+pymysql://os:{self.password}@{self.host}:{self.ports.mariadb}/{name}"
            "?charset=utf8"
        )

    @property
    def transport_url(self) -> str:
        return f"rabbit://guest:guest@{self.host}:{self.ports.amqp}/"


_PATHS: Final = {kind: path for kind, _, path in CATALOG}
