"""OCCM's cloud.conf: every key read as OCCM reads it, OCCM's sections handed on, clouds.yaml
merged under [Global], and every unknown or meaningless input refused with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_ccm.cloud.openstack import from_config
from trio_ccm.cloud.openstack.config import (
    CloudConfig,
    parse_cloud_config,
    parse_duration_s,
    resolve_clouds_yaml,
)
from trio_ccm.cloud.registry import load_provider
from trio_ccm.errors import ConfigError

GLOBAL = """[Global]
auth-url = https://keystone.example:5000/v3
username = ccm
password = "s3cr;et"
tenant-name = k8s
domain-name = Default
region = RegionOne
"""


def test_occm_file_parses() -> None:
    """A cloud.conf as OCCM's docs write it gives every setting, sections handed on raw."""
    config = parse_cloud_config(
        GLOBAL
        + """tenant-domain-id = default
user-domain-name = Users
os-endpoint-type = internalURL
ca-file = /etc/ssl/ca.pem
tls-insecure = no

[Networking]
ipv6-support-disabled
public-network-name = public
public-network-name = ext-2 ; a comment
internal-network-name = private
address-sort-order = 10.0.0.0/8, 2001:db8::/32

[Route]
router-id = 6f3b1f4e-6a4b-4a8c-9fdc-1a2b3c4d5e6f

[Metadata]
search-order = configDrive,metadataService
request-timeout = 1m30s

[LoadBalancer]
subnet-id = abc
floating-network-id = def
Create-Monitor = true

[LoadBalancerClass "internet"]
floating-network-id = ghi

[BlockStorage]
bs-version = v3
"""
    )
    assert config.password == "s3cr;et"
    assert (config.username, config.project_name, config.domain_name) == ("ccm", "k8s", "Default")
    assert (config.project_domain_id, config.user_domain_name) == ("default", "Users")
    assert config.os_endpoint_type == "internalURL"
    assert (config.ca_file, config.tls_insecure) == ("/etc/ssl/ca.pem", False)
    assert config.ipv6_support_disabled is True
    assert config.public_network_names == ("public", "ext-2")
    assert config.internal_network_names == ("private",)
    assert config.address_sort_order == ("10.0.0.0/8", "2001:db8::/32")
    assert config.router_id == "6f3b1f4e-6a4b-4a8c-9fdc-1a2b3c4d5e6f"
    assert config.request_timeout_s == 90.0
    assert config.load_balancer.get("subnet-id") == "abc"
    assert config.load_balancer.get("create-monitor") == "true"
    assert config.load_balancer.where("subnet-id").endswith("line 29")
    assert config.load_balancer_classes["internet"].get("floating-network-id") == "ghi"
    assert any("BlockStorage" in w for w in config.warnings)
    body = config.credentials().auth_body()["auth"]
    assert body["identity"]["password"]["user"] == {
        "name": "ccm",
        "domain": {"name": "Users"},
        "password": "s3cr;et",
    }
    assert body["scope"]["project"] == {"name": "k8s", "domain": {"id": "default"}}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param(
            "[Global]\nauth-url=http://k\napplication-credential-id=ac1\n"
            "application-credential-secret=s\n",
            {"application_credential": {"id": "ac1", "secret": "s"}},
            id="app-cred-by-id",
        ),
        pytest.param(
            "[Global]\nauth-url=http://k\napplication-credential-name=ac\n"
            "application-credential-secret=s\nuser-id=u1\n",
            {"application_credential": {"name": "ac", "secret": "s", "user": {"id": "u1"}}},
            id="app-cred-by-name",
        ),
    ],
)
def test_application_credentials(extra: str, expected: dict[str, object]) -> None:
    """Application credentials need no project: Keystone gets the credential alone."""
    identity = parse_cloud_config(extra).credentials().auth_body()["auth"]["identity"]
    assert identity["methods"] == ["application_credential"]
    assert {k: v for k, v in identity.items() if k != "methods"} == expected


def test_project_spelling() -> None:
    """project-id / project-name are read like OCCM's tenant-id / tenant-name."""
    config = parse_cloud_config(
        "[Global]\nauth-url=http://k\nuser-id=u\npassword=p\nproject-id=p1\n"
    )
    assert config.credentials().auth_body()["auth"]["scope"] == {"project": {"id": "p1"}}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        pytest.param(
            GLOBAL + "project-domian-name = x\n",
            r"line 8: \[Global\] has no key "
            r"'project-domian-name'.*fix the spelling",
            id="typo-in-global",
        ),
        pytest.param(
            GLOBAL + "[Networking]\npublic-network = x\n",
            r"\[Networking\] has no key",
            id="typo-in-networking",
        ),
        pytest.param(
            GLOBAL + "[Routes]\nrouter-id = x\n",
            r"unknown section \[Routes\]",
            id="unknown-section",
        ),
        pytest.param(
            GLOBAL + "trust-id = t\n",
            r"trust-id: trust authentication is not "
            r"supported.*application-credential",
            id="trust-refused",
        ),
        pytest.param(GLOBAL + "token = t\n", r"token: a pre-issued token", id="token-refused"),
        pytest.param(
            GLOBAL + "[Metadata]\nrequest-timeout = 60\n",
            r"request-timeout = '60' "
            r"is no duration: write it with its unit",
            id="duration-without-unit",
        ),
        pytest.param(
            GLOBAL + "[Metadata]\nsearch-order = metadataService,foo\n",
            r"search-order .*at most two of configDrive, metadataService",
            id="search-order",
        ),
        pytest.param(
            GLOBAL + "[Networking]\naddress-sort-order = 10.0.0.0/8, nope\n",
            r"'nope' is no CIDR",
            id="sort-order-cidr",
        ),
        pytest.param(GLOBAL + "tls-insecure = maybe\n", r"is no bool", id="bad-bool"),
        pytest.param(
            GLOBAL + "os-endpoint-type = private\n",
            r"write public, internal or admin",
            id="endpoint-type",
        ),
        pytest.param(
            "[Global]\nauth-url=http://k\nusername=u\npassword=p\ntenant-name=t\n",
            r"username needs its domain",
            id="username-without-domain",
        ),
        pytest.param(
            "[Global]\nauth-url=http://k\nuser-id=u\n", r"password is missing", id="no-password"
        ),
        pytest.param("auth-url = x\n", r"comes before any section", id="no-section"),
        pytest.param(
            GLOBAL + "cert-file = /c.pem\n",
            r"cert-file and key-file go together",
            id="cert-without-key",
        ),
    ],
)
def test_refused(text: str, match: str) -> None:
    """Inputs OCCM would ignore or die on exit with the file, the line, the key and the fix."""
    with pytest.raises(ConfigError, match=match):
        parse_cloud_config(text, source="cloud.conf")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("60s", 60.0, id="s"),
        pytest.param("1m30s", 90.0, id="m-s"),
        pytest.param("500ms", 0.5, id="ms"),
        pytest.param("1.5h", 5400.0, id="fraction"),
        pytest.param("0", 0.0, id="zero"),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    """request-timeout reads Go durations as time.ParseDuration does."""
    assert parse_duration_s(text) == pytest.approx(seconds)


def test_clouds_yaml_merge(tmp_path: Path) -> None:
    """use-clouds reads the named cloud; what [Global] sets wins (OCCM's replaceEmpty)."""
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(
        "clouds:\n  ccm:\n    auth:\n      auth_url: http://127.0.0.1:5000/v3\n"
        "      username: fromyaml\n      password: p\n      project_name: k8s\n"
        "      user_domain_name: Default\n      project_domain_name: Default\n"
        "    region_name: RegionOne\n    interface: internal\n    verify: false\n"
    )
    config = parse_cloud_config(
        f"[Global]\nuse-clouds = true\nclouds-file = {clouds}\ncloud = ccm\nusername = mine\n"
    )
    merged = resolve_clouds_yaml(config, environ={})
    assert merged.username == "mine"
    assert (merged.auth_url, merged.project_name, merged.region) == (
        "http://127.0.0.1:5000/v3",
        "k8s",
        "RegionOne",
    )
    assert (merged.os_endpoint_type, merged.tls_insecure) == ("internal", True)
    with pytest.raises(ConfigError, match=r"has no cloud 'other' \(clouds: ccm\)"):
        resolve_clouds_yaml(CloudConfig(use_clouds=True, clouds_file=str(clouds), cloud="other"))


def test_provider_by_name() -> None:
    """--cloud-provider=openstack finds the provider through its entry point; without a
    cloud.conf it refuses with the keys to write."""
    provider = load_provider("openstack", GLOBAL.encode())
    assert provider.name == "openstack"
    with pytest.raises(ConfigError, match=r"needs --cloud-config"):
        from_config(None)
