"""The public surface is deliberate: adding or removing a name must change this test."""

from __future__ import annotations

import pytest

import trio_ccm
import trio_ccm.cloud
import trio_ccm.testing
import trio_ccm.testing.apiserver


@pytest.mark.parametrize(
    ("module", "names"),
    [
        pytest.param(
            trio_ccm,
            [
                "CcmError",
                "ConfigError",
                "Controller",
                "ControllerContext",
                "RetryAfter",
                "Serving",
                "Settings",
                "__version__",
                "parse_flags",
                "serve",
            ],
            id="trio_ccm",
        ),
        pytest.param(
            trio_ccm.cloud,
            [
                "BulkInstances",
                "CloudProvider",
                "ImplementedElsewhere",
                "InstanceMetadata",
                "InstanceNotFoundError",
                "Instances",
                "InvalidProviderIDError",
                "LoadBalancerIngress",
                "LoadBalancerInventory",
                "LoadBalancerStatus",
                "LoadBalancers",
                "NodeAddress",
                "NodeInfo",
                "OwnedLoadBalancer",
                "PortStatus",
                "RetryAfter",
                "Route",
                "Routes",
                "ServiceInfo",
                "ServicePort",
                "ServiceRefused",
                "ThrottledError",
                "default_load_balancer_name",
            ],
            id="trio_ccm.cloud",
        ),
        pytest.param(
            trio_ccm.testing,
            [
                "ApiServer",
                "RecordingTransport",
                "SimCloud",
                "lb_name",
                "make_lease",
                "make_node",
                "make_service",
                "register_node",
                "run_ccm",
                "virtual_now",
                "wait_for",
            ],
            id="trio_ccm.testing",
        ),
        pytest.param(
            trio_ccm.testing.apiserver,
            [
                "ApiError",
                "ApiServer",
                "ApiServerTransport",
                "FaultRule",
                "Faults",
                "Listening",
                "Request",
                "Response",
                "User",
                "serve_apiserver",
            ],
            id="testing.apiserver",
        ),
    ],
)
def test_exported_names(module: object, names: list[str]) -> None:
    """Each public module exports exactly the listed names, all of them importable."""
    exported = module.__all__  # type: ignore[attr-defined]
    assert sorted(exported) == sorted(names)
    for name in exported:
        assert getattr(module, name) is not None
