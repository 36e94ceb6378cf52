"""Upstream names the CCM reads and writes (k8s.io/cloud-provider and k8s.io/api)."""

from __future__ import annotations

from typing import Final

# Taints
TAINT_UNINITIALIZED: Final = "node.cloudprovider.kubernetes.io/uninitialized"
TAINT_SHUTDOWN: Final = "node.cloudprovider.kubernetes.io/shutdown"
TAINT_TO_BE_DELETED_BY_CA: Final = "ToBeDeletedByClusterAutoscaler"
TAINT_NOT_READY: Final = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE: Final = "node.kubernetes.io/unreachable"

# Node labels
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
LABEL_INSTANCE_TYPE_LEGACY: Final = "beta.kubernetes.io/instance-type"
LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_ZONE_LEGACY: Final = "failure-domain.beta.kubernetes.io/zone"
LABEL_REGION: Final = "topology.kubernetes.io/region"
LABEL_REGION_LEGACY: Final = "failure-domain.beta.kubernetes.io/region"
LABEL_EXCLUDE_FROM_LB: Final = "node.kubernetes.io/exclude-from-external-load-balancers"
LABEL_EXCLUDE_DISRUPTION: Final = "node.kubernetes.io/exclude-disruption"
LABEL_CONTROL_PLANE: Final = "node-role.kubernetes.io/control-plane"

# Annotations
ANNOTATION_PROVIDED_NODE_IP: Final = "alpha.kubernetes.io/provided-node-ip"
ANNOTATION_LB_SOURCE_RANGES: Final = "service.beta.kubernetes.io/load-balancer-source-ranges"

# Finalizers
FINALIZER_LB_CLEANUP: Final = "service.kubernetes.io/load-balancer-cleanup"

# Node conditions
CONDITION_READY: Final = "Ready"
CONDITION_NETWORK_UNAVAILABLE: Final = "NetworkUnavailable"

# Controller names (canonical, as in --controllers, logs, metrics) and their aliases
CLOUD_NODE_CONTROLLER: Final = "cloud-node-controller"
CLOUD_NODE_LIFECYCLE_CONTROLLER: Final = "cloud-node-lifecycle-controller"
SERVICE_LB_CONTROLLER: Final = "service-lb-controller"
NODE_ROUTE_CONTROLLER: Final = "node-route-controller"
NODE_IPAM_CONTROLLER: Final = "node-ipam-controller"
CONTROLLER_ALIASES: Final = {
    "cloud-node": CLOUD_NODE_CONTROLLER,
    "cloud-node-lifecycle": CLOUD_NODE_LIFECYCLE_CONTROLLER,
    "service": SERVICE_LB_CONTROLLER,
    "route": NODE_ROUTE_CONTROLLER,
    "nodeipam": NODE_IPAM_CONTROLLER,
}
BUILTIN_CONTROLLER_NAMES: Final = (
    CLOUD_NODE_CONTROLLER,
    CLOUD_NODE_LIFECYCLE_CONTROLLER,
    SERVICE_LB_CONTROLLER,
    NODE_ROUTE_CONTROLLER,
    NODE_IPAM_CONTROLLER,
)
"""The built-in controllers' names, in the order they start (`actors.builtin`)."""

# Event source components (as upstream writes them; note route_controller's underscore)
COMPONENT_CLOUD_NODE: Final = "cloud-node-controller"
COMPONENT_CLOUD_NODE_LIFECYCLE: Final = "cloud-node-lifecycle-controller"
COMPONENT_SERVICE: Final = "service-controller"
COMPONENT_ROUTE: Final = "route_controller"
COMPONENT_IPAM: Final = "cidrAllocator"

# Event reasons
REASON_SYNCED: Final = "Synced"
REASON_DELETING_NODE: Final = "DeletingNode"
REASON_DELETING_NODE_FAILED: Final = "DeletingNodeFailed"
REASON_ENSURING_LB: Final = "EnsuringLoadBalancer"
REASON_ENSURED_LB: Final = "EnsuredLoadBalancer"
REASON_DELETING_LB: Final = "DeletingLoadBalancer"
REASON_DELETED_LB: Final = "DeletedLoadBalancer"
REASON_UPDATED_LB: Final = "UpdatedLoadBalancer"
REASON_SYNC_LB_FAILED: Final = "SyncLoadBalancerFailed"
REASON_DELETE_LB_FAILED: Final = "DeleteLoadBalancerFailed"
REASON_UPDATE_LB_FAILED: Final = "UpdateLoadBalancerFailed"
REASON_UNAVAILABLE_LB: Final = "UnAvailableLoadBalancer"
REASON_FAILED_TO_CREATE_ROUTE: Final = "FailedToCreateRoute"
REASON_CIDR_NOT_AVAILABLE: Final = "CIDRNotAvailable"
REASON_CIDR_ASSIGNMENT_FAILED: Final = "CIDRAssignmentFailed"
REASON_LEADER_ELECTION: Final = "LeaderElection"
# Ours (no upstream reason exists for these refusals):
REASON_INVALID_PROVIDER_ID: Final = "InvalidProviderID"
REASON_DUPLICATE_PROVIDER_ID: Final = "DuplicateProviderID"
REASON_INSTANCE_NOT_FOUND: Final = "InstanceNotFound"
REASON_POD_CIDR_OUTSIDE_CLUSTER: Final = "PodCIDROutsideClusterCIDR"

# Route condition reasons and messages
ROUTE_CREATED: Final = ("RouteCreated", "RouteController created a route")
NO_ROUTE_CREATED: Final = ("NoRouteCreated", "RouteController failed to create a route")

# Lease
LEASE_NAMESPACE: Final = "kube-system"
LEASE_NAME: Final = "cloud-controller-manager"

DEFAULT_SECURE_PORT: Final = 10258
