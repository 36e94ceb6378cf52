"""The cloud-config in cloud-provider-aws's format: every key, gcfg's syntax, and every
refusal naming the line, the key and the fix."""

from __future__ import annotations

import re

import pytest

from trio_ccm.cloud.aws import CloudConfig, ServiceOverride, from_config, parse_cloud_config
from trio_ccm.cloud.aws.client import endpoint_for
from trio_ccm.errors import ConfigError

FULL = """\
; cloud-provider-aws's keys, each set
[Global]
Zone = us-west-2a
VPC = vpc-0123456789abcdef0
SubnetID = subnet-0123456789abcdef0
RouteTableID = rtb-0123456789abcdef0
RoleARN = arn:aws:iam::123456789012:role/ccm
SourceARN = arn:aws:eks:us-west-2:123456789012:cluster/prod
KubernetesClusterID = prod
DisableSecurityGroupIngress = true
ElbSecurityGroup = sg-0123456789abcdef0
NodeIPFamilies = ipv6
NodeIPFamilies = ipv4
ClusterServiceLoadBalancerHealthProbeMode = Shared
ClusterServiceSharedLoadBalancerHealthProbePort = 10257
ClusterServiceSharedLoadBalancerHealthProbePath = /livez
SupportedTopologyInstanceTypePattern = "^(p5|trn2)\\\\..*$"
NLBSecurityGroupMode = Managed

[ServiceOverride "1"]
Service = ec2
Region = us-west-2
URL = https://ec2.example.internal/
SigningRegion = us-west-2
SigningMethod = v4

[ServiceOverride "2"]
Service = Elastic Load Balancing v2
Region = us-west-2
URL = https://elbv2.example.internal
SigningRegion = us-west-2
SigningName = elasticloadbalancing
"""


def test_every_global_key_and_override_is_read() -> None:
    """A file setting every [Global] key and two overrides parses to exactly those values."""
    config = parse_cloud_config(FULL.encode())
    assert config == CloudConfig(
        zone="us-west-2a",
        vpc="vpc-0123456789abcdef0",
        subnet_id="subnet-0123456789abcdef0",
        route_table_id="rtb-0123456789abcdef0",
        role_arn="arn:aws:iam::123456789012:role/ccm",
        source_arn="arn:aws:eks:us-west-2:123456789012:cluster/prod",
        kubernetes_cluster_id="prod",
        disable_security_group_ingress=True,
        elb_security_group="sg-0123456789abcdef0",
        node_ip_families=("ipv6", "ipv4"),
        cluster_service_load_balancer_health_probe_mode="Shared",
        cluster_service_shared_load_balancer_health_probe_port=10257,
        cluster_service_shared_load_balancer_health_probe_path="/livez",
        supported_topology_instance_type_pattern=r"^(p5|trn2)\..*$",
        nlb_security_group_mode="Managed",
        service_overrides=(
            ServiceOverride(
                "1", "ec2", "us-west-2", "https://ec2.example.internal", "us-west-2", "", "v4"
            ),
            ServiceOverride(
                "2",
                "Elastic Load Balancing v2",
                "us-west-2",
                "https://elbv2.example.internal",
                "us-west-2",
                "elasticloadbalancing",
            ),
        ),
    )
    assert config.configured_region == "us-west-2"
    assert config.cluster_id == "prod"
    assert config.supported_topology_instance_type_pattern == "^(p5|trn2)\\..*$"
    assert config.warnings == ()


def test_defaults_without_a_file() -> None:
    """No file, or an empty one: every default (ipv4 addresses, port 10256, /healthz)."""
    assert from_config(None).config == CloudConfig()
    assert parse_cloud_config(b"") == CloudConfig()
    default = CloudConfig()
    assert default.node_ip_families == ("ipv4",)
    assert default.cluster_service_shared_load_balancer_health_probe_port == 10256
    assert default.cluster_service_shared_load_balancer_health_probe_path == "/healthz"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "[global]\nregion=eu-west-1\n", {"region": "eu-west-1"}, id="case-insensitive"
        ),
        pytest.param(
            "[Global]\n  Region   =   eu-west-1   ; comment\n",
            {"region": "eu-west-1"},
            id="spaces-and-comment",
        ),
        pytest.param(
            '[Global]\nKubernetesClusterID = "my cluster # one"\n',
            {"kubernetes_cluster_id": "my cluster # one"},
            id="quoted-value",
        ),
        pytest.param(
            '[Global]\nKubernetesClusterID = "a\\"b\\\\c"\n',
            {"kubernetes_cluster_id": 'a"b\\c'},
            id="escapes",
        ),
        pytest.param(
            "[Global]\nKubernetesClusterID = long\\\nname\n",
            {"kubernetes_cluster_id": "longname"},
            id="continuation",
        ),
        pytest.param(
            "[Global]\nDisableSecurityGroupIngress\n",
            {"disable_security_group_ingress": True},
            id="bare-bool-is-true",
        ),
        pytest.param(
            "[Global]\nDisableSecurityGroupIngress = off\n",
            {"disable_security_group_ingress": False},
            id="bool-words",
        ),
        pytest.param(
            "[Global]\nRegion = us-east-1\nRegion = eu-west-1\n",
            {"region": "eu-west-1"},
            id="repeated-key-overrides",
        ),
        pytest.param(
            "[Global]\nNodeIPFamilies = ipv4\nNodeIPFamilies\nNodeIPFamilies = ipv6\n",
            {"node_ip_families": ("ipv6",)},
            id="bare-multi-value-empties",
        ),
        pytest.param(
            "[Global]\nKubernetesClusterTag = legacy\n",
            {"kubernetes_cluster_tag": "legacy"},
            id="legacy-cluster-tag",
        ),
        pytest.param(
            "[Global]\nClusterServiceSharedLoadBalancerHealthProbePort = 0x2810\n",
            {"cluster_service_shared_load_balancer_health_probe_port": 10256},
            id="hex-port",
        ),
        pytest.param(
            "\ufeff# comment\n[Global]\r\nRegion = eu-west-1\r\n",
            {"region": "eu-west-1"},
            id="bom-and-crlf",
        ),
    ],
)
def test_gcfg_syntax(text: str, expected: dict[str, object]) -> None:
    """gcfg's syntax as upstream's reader accepts it."""
    config = parse_cloud_config(text.encode())
    for attr, value in expected.items():
        assert getattr(config, attr) == value


def test_disable_strict_zone_check_is_accepted_with_a_warning() -> None:
    """DisableStrictZoneCheck (removed upstream) is accepted without effect, with a warning."""
    config = parse_cloud_config(b"[Global]\nDisableStrictZoneCheck = true\n")
    assert config == CloudConfig()
    assert len(config.warnings) == 1
    assert "DisableStrictZoneCheck" in config.warnings[0]
    assert "line 2" in config.warnings[0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "[Global]\nRegoin = us-east-1\n",
            "line 2: [Global] has no key 'Regoin'; check the spelling",
            id="unknown-key",
        ),
        pytest.param("[Globl]\n", "line 1: unknown section [Globl]", id="unknown-section"),
        pytest.param(
            "Region = x\n", "line 1: 'Region = x' comes before any section", id="no-section"
        ),
        pytest.param(
            "[Global]\nRegion = us_east_1\n", "Region = 'us_east_1': must be a region", id="region"
        ),
        pytest.param(
            "[Global]\nZone = nowhere\n",
            "Zone = 'nowhere': must be an availability zone",
            id="zone",
        ),
        pytest.param(
            "[Global]\nVPC = 12345\n", "VPC = '12345': must be a VPC ID (vpc-...)", id="vpc"
        ),
        pytest.param(
            "[Global]\nSubnetID = sn-1\n", "SubnetID = 'sn-1': must be a subnet ID", id="subnet"
        ),
        pytest.param(
            "[Global]\nRouteTableID = rt-1\n",
            "RouteTableID = 'rt-1': must be a route table ID",
            id="route-table",
        ),
        pytest.param(
            "[Global]\nElbSecurityGroup = default\n",
            "ElbSecurityGroup = 'default': must be a security group ID",
            id="security-group",
        ),
        pytest.param(
            "[Global]\nRoleARN = ccm-role\n",
            "RoleARN = 'ccm-role': must be an IAM role ARN",
            id="role-arn",
        ),
        pytest.param(
            "[Global]\nSourceARN = cluster\n",
            "SourceARN = 'cluster': must be an ARN",
            id="source-arn",
        ),
        pytest.param(
            "[Global]\nDisableSecurityGroupIngress = maybe\n",
            "DisableSecurityGroupIngress: 'maybe' is not a bool; write true or false",
            id="bool",
        ),
        pytest.param(
            "[Global]\nNodeIPFamilies = ipv5\n",
            "NodeIPFamilies = 'ipv5': must be ipv4 or ipv6",
            id="family",
        ),
        pytest.param(
            "[Global]\nNodeIPFamilies = ipv4\nNodeIPFamilies = ipv4\n",
            "NodeIPFamilies lists a family twice",
            id="family-twice",
        ),
        pytest.param(
            "[Global]\nNodeIPFamilies\n",
            "NodeIPFamilies is emptied and never set",
            id="family-empty",
        ),
        pytest.param(
            "[Global]\nClusterServiceLoadBalancerHealthProbeMode = shared\n",
            "must be Shared or ServiceNodePort",
            id="probe-mode",
        ),
        pytest.param(
            "[Global]\nClusterServiceSharedLoadBalancerHealthProbePort = 70000\n",
            "must be a port number from 1 to 65535",
            id="probe-port",
        ),
        pytest.param(
            "[Global]\nClusterServiceSharedLoadBalancerHealthProbePort = ten\n",
            "'ten' is not a whole number",
            id="probe-port-text",
        ),
        pytest.param(
            "[Global]\nClusterServiceSharedLoadBalancerHealthProbePath = healthz\n",
            "must be an HTTP path starting with /",
            id="probe-path",
        ),
        pytest.param(
            "[Global]\nSupportedTopologyInstanceTypePattern = ([\n",
            "must be a regular expression",
            id="pattern",
        ),
        pytest.param(
            "[Global]\nNLBSecurityGroupMode = managed\n", "must be Managed (or empty)", id="nlb-sg"
        ),
        pytest.param(
            "[Global]\nKubernetesClusterTag = a\nKubernetesClusterID = b\n",
            "KubernetesClusterTag = 'a' and KubernetesClusterID = 'b' differ",
            id="cluster-ids-differ",
        ),
        pytest.param(
            "[Global]\nZone = us-east-1a\nRegion = eu-west-1\n",
            "Zone = 'us-east-1a' is not in Region = 'eu-west-1'",
            id="zone-region",
        ),
        pytest.param("[Global]\nRegion\n", "Region: the key has no value", id="bare-string"),
        pytest.param(
            '[Global]\nKubernetesClusterID = "open\n', "a double quote is not closed", id="quote"
        ),
        pytest.param("[Global]\nKubernetesClusterID = a\\b\n", "invalid escape \\b", id="escape"),
        pytest.param(
            '[ServiceOverride "1"]\nService = ec2\nRegion = us-east-1\nURL = https://x\n',
            'line 1: [ServiceOverride "1"] SigningRegion is missing',
            id="override-signing-region",
        ),
        pytest.param(
            '[ServiceOverride "1"]\nService = ec2\nRegion = us-east-1\nURL = ftp://x\n'
            "SigningRegion = us-east-1\n",
            "URL = 'ftp://x' must be an http:// or https:// URL",
            id="override-url",
        ),
        pytest.param(
            '[ServiceOverride "1"]\nEndpoint = https://x\n',
            "[ServiceOverride \"1\"] has no key 'Endpoint'",
            id="override-unknown-key",
        ),
        pytest.param("[ServiceOverride]\n", "[ServiceOverride] needs a name", id="override-name"),
        pytest.param(
            '[ServiceOverride "1"]\nService=ec2\nRegion=us-east-1\nURL=https://a\n'
            'SigningRegion=us-east-1\n[ServiceOverride "2"]\nService=ec2\nRegion=us-east-1\n'
            "URL=https://b\nSigningRegion=us-east-1\n",
            'overrides ec2 in us-east-1 again (already in [ServiceOverride "1"])',
            id="override-duplicate",
        ),
        pytest.param(b"\xff\xfe[Global]", "not UTF-8 text", id="not-utf8"),
    ],
)
def test_refusals_name_the_line_the_key_and_the_fix(text: str | bytes, message: str) -> None:
    """An unknown section or key, or a value that cannot mean anything, is a ConfigError
    saying where and what to write instead."""
    data = text if isinstance(text, bytes) else text.encode()
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        parse_cloud_config(data, source="/etc/aws/cloud.conf")
    assert str(caught.value).startswith("/etc/aws/cloud.conf")


@pytest.mark.parametrize(
    ("service", "client_service", "applies"),
    [
        pytest.param("ec2", "ec2", True, id="v1-ec2"),
        pytest.param("EC2", "ec2", True, id="v2-ec2"),
        pytest.param("elasticloadbalancing", "elb", True, id="v1-elb-classic"),
        pytest.param("elasticloadbalancing", "elbv2", True, id="v1-elb-both"),
        pytest.param("Elastic Load Balancing", "elb", True, id="v2-elb"),
        pytest.param("Elastic Load Balancing", "elbv2", False, id="v2-elb-not-v2"),
        pytest.param("Elastic Load Balancing v2", "elbv2", True, id="v2-elbv2"),
        pytest.param("sts", "sts", True, id="sts"),
        pytest.param("s3", "ec2", False, id="unused-service"),
    ],
)
def test_overrides_match_sdk_v1_and_v2_service_names(
    service: str, client_service: str, applies: bool
) -> None:
    """Overrides written for upstream's SDK v2 IDs or for the older v1 endpoint IDs both
    apply; an override for a service trio-ccm does not call is accepted and unused."""
    config = parse_cloud_config(
        f'[ServiceOverride "1"]\nService = {service}\nRegion = eu-west-1\n'
        "URL = http://127.0.0.1:5000\nSigningRegion = eu-central-1\nSigningName = custom\n".encode()
    )
    endpoint = endpoint_for(client_service, "eu-west-1", config)
    if applies:
        assert (endpoint.url, endpoint.signing_region, endpoint.signing_name) == (
            "http://127.0.0.1:5000",
            "eu-central-1",
            "custom",
        )
    else:
        assert endpoint.url.startswith("https://")
    # Another region is not overridden.
    assert endpoint_for(client_service, "us-east-1", config).url.endswith(".amazonaws.com")


@pytest.mark.parametrize(
    ("service", "region", "url"),
    [
        pytest.param("ec2", "us-east-1", "https://ec2.us-east-1.amazonaws.com", id="ec2"),
        pytest.param(
            "elbv2", "eu-west-1", "https://elasticloadbalancing.eu-west-1.amazonaws.com", id="elbv2"
        ),
        pytest.param("sts", "us-west-2", "https://sts.us-west-2.amazonaws.com", id="sts"),
        pytest.param("ec2", "cn-north-1", "https://ec2.cn-north-1.amazonaws.com.cn", id="china"),
    ],
)
def test_default_endpoints(service: str, region: str, url: str) -> None:
    """Without an override, AWS's regional endpoint (China regions end in .com.cn)."""
    assert endpoint_for(service, region, CloudConfig()).url == url


def test_the_provider_is_found_by_name_and_its_errors_pass_through() -> None:
    """`--cloud-provider=aws` finds this provider (entry point), and its ConfigError reaches
    the command unchanged (which prefixes --cloud-config=FILE)."""
    from trio_ccm.cloud.registry import available_providers, load_provider

    assert "aws" in available_providers()
    assert load_provider("aws", b"[Global]\nRegion = eu-west-1\n").name == "aws"
    with pytest.raises(ConfigError, match=r"aws cloud-config line 2: \[Global\] has no key"):
        load_provider("aws", b"[Global]\nColour = blue\n")
