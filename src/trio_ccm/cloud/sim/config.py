"""`from_config`: the `sim` provider from its cloud-config YAML (`url`, optional `replica`)."""

from __future__ import annotations

import os
import socket

import yaml

from trio_ccm.cloud.sim.provider import SimProvider
from trio_ccm.errors import ConfigError

_EXAMPLE = "e.g.\n  url: http://127.0.0.1:8080\n  replica: ccm-0   # optional"
_KEYS = ("url", "replica", "timeout_s")
# Below this no call can succeed (each would time out before an answer); above it a hung
# call holds its Service or Node for minutes.
_MIN_TIMEOUT_S = 0.1
_MAX_TIMEOUT_S = 300.0


def default_replica() -> str:
    """`<hostname>_<pid>`, like client-go's default leader-election identity."""
    return f"{socket.gethostname()}_{os.getpid()}"


def from_config(config: bytes | None) -> SimProvider:
    """Build the provider from the cloud-config file's bytes; ConfigError saying what to fix.

    Keys: `url` (required, http or https), `replica` (the name this CCM replica gives in
    the cloud's call log; default `<hostname>_<pid>`), `timeout_s` (per request, default 10).
    """
    if config is None or not config.strip():
        raise ConfigError(
            "sim cloud config: `url` is required (pass --cloud-config with a YAML file), "
            + _EXAMPLE
        )
    try:
        data = yaml.safe_load(config)
    except yaml.YAMLError as exc:
        raise ConfigError(f"sim cloud config: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"sim cloud config: expected a mapping with `url`, got {type(data).__name__}; "
            + _EXAMPLE
        )
    unknown = sorted(str(key) for key in data if key not in _KEYS)
    if unknown:
        raise ConfigError(
            f"sim cloud config: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_KEYS)}"
        )
    url = data.get("url")
    if not url:
        raise ConfigError("sim cloud config: `url` is required, " + _EXAMPLE)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"sim cloud config: `url` must be an http:// or https:// URL, not {url!r}; " + _EXAMPLE
        )
    replica = data.get("replica")
    if replica is None:
        replica = default_replica()
    elif not isinstance(replica, str) or not replica:
        raise ConfigError(
            f"sim cloud config: `replica` must be a non-empty string, not {replica!r}"
        )
    timeout_s = data.get("timeout_s", 10.0)
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not _MIN_TIMEOUT_S <= timeout_s <= _MAX_TIMEOUT_S
    ):
        raise ConfigError(
            f"sim cloud config: `timeout_s` must be a number of seconds from {_MIN_TIMEOUT_S:g} "
            f"to {_MAX_TIMEOUT_S:g}, not {timeout_s!r} (the default is 10)"
        )
    return SimProvider(url=url, replica=replica, timeout_s=float(timeout_s))
