"""The public surface is deliberate: adding or removing a name must change this test.

Every public module (`tests.helpers.docs.PUBLIC_MODULES`, which the docs' tests also use
to tell public imports from private ones) is listed with its whole `__all__`.
"""

from __future__ import annotations

import importlib

import pytest

from tests.helpers.docs import PUBLIC_MODULES

SURFACE = [
    pytest.param(
        "trio_ccm",
        [
            "CcmError",
            "ConfigError",
            "Controller",
            "ControllerContext",
            "RetryAfter",
            "Serving",
            "Settings",
            "__version__",
            "configure_logging",
            "parse_flags",
            "serve",
        ],
        id="trio_ccm",
    ),
    pytest.param(
        "trio_ccm.cloud",
        [
            "BulkInstances",
            "CloudProvider",
            "ClusterIdentityAware",
            "ImplementedElsewhere",
            "InstanceChangeFeed",
            "InstanceChanges",
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
            "OutcomeUnknownError",
            "OwnedLoadBalancer",
            "PortStatus",
            "RetryAfter",
            "Route",
            "Routes",
            "ServiceInfo",
            "ServicePort",
            "ServiceRefused",
            "StaleCursorError",
            "ThrottledError",
            "default_load_balancer_name",
        ],
        id="trio_ccm.cloud",
    ),
    pytest.param(
        "trio_ccm.cloud.sim",
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
        id="trio_ccm.cloud.sim",
    ),
    pytest.param(
        "trio_ccm.controllers",
        [
            "Backoff",
            "Changed",
            "ConflictError",
            "Controller",
            "ControllerContext",
            "ControllerSetup",
            "Gone",
            "KeyedActors",
            "KubeClient",
            "KubeError",
            "Message",
            "NODES",
            "Node",
            "NotFoundError",
            "Patch",
            "Reverify",
            "SERVICES",
            "Service",
            "Wake",
            "add_finalizer",
            "add_taint",
            "has_taint",
            "info",
            "node_info",
            "remove_finalizer",
            "remove_taint",
            "serve_passes",
            "service_info",
            "set_annotations",
            "set_condition",
            "set_labels",
            "taints_json",
            "warn",
        ],
        id="trio_ccm.controllers",
    ),
    pytest.param(
        "trio_ccm.testing",
        [
            "ApiServer",
            "EPOCH",
            "RecordingTransport",
            "SimCloud",
            "TAINT_UNINITIALIZED",
            "emulator_connection",
            "lb_name",
            "make_lease",
            "make_node",
            "make_service",
            "ready_condition",
            "register_node",
            "run_ccm",
            "virtual_now",
            "wait_for",
        ],
        id="trio_ccm.testing",
    ),
    pytest.param(
        "trio_ccm_testbed.apiserver",
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
        id="trio_ccm_testbed.apiserver",
    ),
    pytest.param(
        "trio_ccm_testbed.cloud",
        [
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
            "METHOD_FAMILIES",
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
        id="trio_ccm_testbed.cloud",
    ),
    pytest.param(
        "trio_ccm.testing.factories",
        [
            "TAINT_UNINITIALIZED",
            "lb_name",
            "make_lease",
            "make_node",
            "make_service",
            "ready_condition",
        ],
        id="trio_ccm.testing.factories",
    ),
    pytest.param(
        "trio_ccm.testing.harness",
        [
            "EPOCH",
            "RecordingTransport",
            "Write",
            "emulator_connection",
            "register_node",
            "run_ccm",
            "virtual_now",
            "wait_for",
        ],
        id="trio_ccm.testing.harness",
    ),
    pytest.param(
        "trio_ccm.testing.plugin",
        [
            "RunCcm",
            "api",
            "api_client",
            "ccm",
            "kubelet",
            "sim_cloud",
            "sim_provider",
        ],
        id="trio_ccm.testing.plugin",
    ),
]


@pytest.mark.parametrize(("module", "names"), SURFACE)
def test_exported_names(module: str, names: list[str]) -> None:
    """Each public module exports exactly the listed names, all of them importable."""
    imported = importlib.import_module(module)
    exported = imported.__all__
    assert sorted(exported) == sorted(names)
    for name in exported:
        assert getattr(imported, name) is not None


def test_every_public_module_is_pinned() -> None:
    """The pinned modules are exactly the public ones."""
    assert [param.values[0] for param in SURFACE] == list(PUBLIC_MODULES)
