"""Find a cloud provider by name (`--cloud-provider`) and build it from `--cloud-config`.

Providers are found through the `trio_ccm.providers` entry-point group: the entry point's
name is the provider name and its object a factory taking the cloud-config file's contents
(bytes, or None when no file was given) and returning a `CloudProvider`. Nothing is
registered at import time: there is no global registry, and a program embedding trio-ccm
may build its provider itself and pass it to `serve()`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Final

from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.errors import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "Factory", "available_providers", "load_provider"]

ENTRY_POINT_GROUP: Final = "trio_ccm.providers"

Factory = Callable[[bytes | None], CloudProvider]


def _entry_points() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    return found


def available_providers() -> list[str]:
    """The names of the installed providers, sorted."""
    return sorted(_entry_points())


def read_cloud_config(path: str | None) -> bytes | None:
    """The cloud-config file's contents (None without a path); a clear error when unreadable."""
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"--cloud-config={path}: cannot read the cloud config file ({exc.strerror}); "
            "check the path and the mount"
        ) from exc


def load_provider(name: str, config: bytes | None) -> CloudProvider:
    """Build provider `name` from its cloud-config; ConfigError names what is wrong."""
    if not name:
        raise ConfigError(
            "--cloud-provider is required: name the cloud, e.g. --cloud-provider=sim "
            f"(installed: {', '.join(available_providers()) or 'none'})"
        )
    ep = _entry_points().get(name)
    if ep is None:
        raise ConfigError(
            f"--cloud-provider={name}: unknown cloud provider "
            f"(installed: {', '.join(available_providers()) or 'none'})"
        )
    try:
        factory: Factory = ep.load()
    except Exception as exc:
        raise ConfigError(f"--cloud-provider={name}: cannot load {ep.value}: {exc}") from exc
    try:
        provider = factory(config)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"--cloud-provider={name}: could not init cloud provider from --cloud-config: {exc}"
        ) from exc
    if not isinstance(provider, CloudProvider):
        raise ConfigError(
            f"--cloud-provider={name}: the factory {ep.value} returned {type(provider).__name__}, "
            "which lacks name/instances/load_balancers/routes/initialize"
        )
    return provider
