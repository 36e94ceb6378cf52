"""The cloud-config file the `sim` provider reads: `url` and, optionally, `replica`."""

from __future__ import annotations

import os

import yaml


def cloud_config(url: str, replica: str | None = None) -> bytes:
    """The YAML of a `sim` cloud config pointing at `url` (replica: the provider's default)."""
    config = {"url": url} if replica is None else {"url": url, "replica": replica}
    return yaml.safe_dump(config, sort_keys=False).encode()


def write_cloud_config(
    path: str | os.PathLike[str], *, url: str, replica: str | None = None
) -> None:
    """Write `cloud_config(url, replica)` to `path` (for `--cloud-config`)."""
    with open(path, "wb") as handle:
        handle.write(cloud_config(url, replica))
