"""The `sim` provider's cloud config, its entry point, and the public names of both packages."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

import trio_ccm.cloud.sim
import trio_ccm_testbed.cloud
from trio_ccm.cloud.registry import available_providers, load_provider
from trio_ccm.cloud.sim import SimProvider, from_config
from trio_ccm.errors import ConfigError
from trio_ccm_testbed.cloud import cloud_config, write_cloud_config


def test_config_gives_url_and_replica() -> None:
    """`url` and `replica` from the YAML become the provider's."""
    provider = from_config(b"url: http://127.0.0.1:8080\nreplica: ccm-1\ntimeout_s: 2\n")
    assert (provider.url, provider.replica) == ("http://127.0.0.1:8080", "ccm-1")


def test_replica_defaults_to_host_and_pid() -> None:
    """Without `replica` the provider calls itself <hostname>_<pid>."""
    provider = from_config(b"url: http://127.0.0.1:8080\n")
    assert provider.replica == f"{socket.gethostname()}_{os.getpid()}"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        pytest.param(None, "`url` is required", id="no-file"),
        pytest.param(b"  \n", "`url` is required", id="empty"),
        pytest.param(b"replica: x\n", "`url` is required, e.g.", id="no-url"),
        pytest.param(b"url: [\n", "not valid YAML", id="yaml"),
        pytest.param(b"- url\n", "expected a mapping with `url`, got list", id="list"),
        pytest.param(b"url: ftp://x\n", "must be an http:// or https:// URL", id="scheme"),
        pytest.param(b"url: 8080\n", "must be an http:// or https:// URL", id="number"),
        pytest.param(b"url: http://x\ncolour: red\n", "unknown key(s) colour", id="unknown"),
        pytest.param(b"url: http://x\nreplica: ''\n", "`replica` must be a non-empty", id="rep"),
        pytest.param(b"url: http://x\ntimeout_s: 0\n", "`timeout_s` must be a number", id="t"),
        pytest.param(
            b"url: http://x\ntimeout_s: 0.000001\n",
            "`timeout_s` must be a number of seconds from 0.1 to 300, not 1e-06",
            id="tiny",
        ),
        pytest.param(b"url: http://x\ntimeout_s: 86400\n", "from 0.1 to 300", id="huge"),
        pytest.param(b"url: http://x\ntimeout_s: yes\n", "`timeout_s` must be", id="bool"),
    ],
)
def test_bad_config_says_what_to_fix(config: bytes | None, message: str) -> None:
    """A missing, malformed or incomplete config is a ConfigError naming what the file needs."""
    with pytest.raises(ConfigError, match=r"^sim cloud config: ") as caught:
        from_config(config)
    assert message in str(caught.value)


def test_cloud_config_helpers_round_trip(tmp_path: Path) -> None:
    """cloud_config / write_cloud_config produce YAML that from_config reads back."""
    assert from_config(cloud_config("http://127.0.0.1:1")).url == "http://127.0.0.1:1"
    path = tmp_path / "cloud.yaml"
    write_cloud_config(path, url="http://127.0.0.1:2", replica="ccm-2")
    provider = from_config(path.read_bytes())
    assert (provider.url, provider.replica) == ("http://127.0.0.1:2", "ccm-2")


def test_registered_as_entry_point() -> None:
    """`--cloud-provider=sim` finds the provider through the entry point."""
    assert "sim" in available_providers()
    provider = load_provider("sim", cloud_config("http://127.0.0.1:3", "r"))
    assert isinstance(provider, SimProvider)
    with pytest.raises(ConfigError, match="`url` is required"):
        load_provider("sim", None)


@pytest.mark.parametrize(
    ("module", "names"),
    [
        pytest.param(
            trio_ccm.cloud.sim,
            [
                "SimCloudError",
                "SimInstances",
                "SimLoadBalancers",
                "SimProvider",
                "SimRoutes",
                "default_load_balancer_name",
                "from_config",
                "provider_id",
            ],
            id="cloud.sim",
        ),
        pytest.param(
            trio_ccm_testbed.cloud,
            [
                "METHOD_FAMILIES",
                "Call",
                "CloudRoute",
                "ErrorRule",
                "FaultRule",
                "Faults",
                "Instance",
                "LatencyRule",
                "Listening",
                "LoadBalancer",
                "LoadBalancerPort",
                "Request",
                "Response",
                "SimApiError",
                "SimCloud",
                "SimCloudTransport",
                "ThrottleRule",
                "cloud_config",
                "serve_sim_cloud",
                "write_cloud_config",
            ],
            id="testing.cloud",
        ),
    ],
)
def test_exported_names(module: object, names: list[str]) -> None:
    """Each package exports exactly the listed names, all of them importable."""
    exported = module.__all__  # type: ignore[attr-defined]
    assert sorted(exported) == sorted(names)
    for name in exported:
        assert getattr(module, name) is not None
