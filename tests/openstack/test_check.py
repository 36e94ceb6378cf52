"""The openstack provider's start-up probe, `check()`: read-only and cheap (a Keystone token
and Nova's version document), against the real Keystone and Nova through the world's
proxy; refused credentials are an error naming the config keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from trio_ccm.cloud.openstack.config import parse_cloud_config
from trio_ccm.cloud.openstack.errors import OpenStackAuthError
from trio_ccm.cloud.openstack.provider import OpenStackProvider


def provider_with(world: Any, tmp_path: Path, **global_keys: str) -> OpenStackProvider:
    conf = world.write_cloud_conf(tmp_path / "cloud.conf", extra={"Global": global_keys})
    return OpenStackProvider(parse_cloud_config(conf.read_bytes(), source=str(conf)))


async def test_check_authenticates_and_reads_one_version_document(
    openstack: Any, tmp_path: Path
) -> None:
    """check() makes one Keystone authentication and one GET of Nova's version document,
    and writes nothing to any service."""
    openstack.faults.clear()
    provider = provider_with(openstack, tmp_path)
    try:
        with trio.fail_after(60):
            await provider.check()
    finally:
        await provider.aclose()
    assert provider.client.statistics().auths == 1
    assert [m for m, _ in openstack.faults.seen("compute")] == ["GET"]
    for service in ("network", "load-balancer", "image", "placement"):
        assert openstack.faults.seen(service) == []
    assert [m for m, _ in openstack.faults.seen("identity")] == ["POST"]  # the token


async def test_check_with_a_wrong_password_names_the_keys(openstack: Any, tmp_path: Path) -> None:
    """Refused credentials make check() raise OpenStackAuthError naming the cloud.conf
    keys to fix, before any call to Nova."""
    openstack.faults.clear()
    provider = provider_with(openstack, tmp_path, password="not-the-password")
    try:
        with trio.fail_after(60), pytest.raises(OpenStackAuthError) as caught:
            await provider.check()
    finally:
        await provider.aclose()
    assert "password" in str(caught.value)
    assert openstack.faults.seen("compute") == []
