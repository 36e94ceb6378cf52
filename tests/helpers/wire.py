"""Objects as the API server sends them (JSON), for tests of decoding and caching."""

from __future__ import annotations

from typing import Any

# A Node as a kubelet and a CCM leave it (with a field and a condition the cache drops).
NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "node-1",
        "uid": "u1",
        "resourceVersion": "7",
        "labels": {"kubernetes.io/hostname": "node-1", "topology.kubernetes.io/zone": "a"},
        "annotations": {
            "alpha.kubernetes.io/provided-node-ip": "10.0.0.1",
            "node.alpha.kubernetes.io/ttl": "0",
        },
    },
    "spec": {
        "providerID": "sim://node-1",
        "podCIDR": "10.244.1.0/24",
        "podCIDRs": ["10.244.1.0/24"],
        "unknownField": True,
    },
    "status": {
        "addresses": [
            {"type": "Hostname", "address": "node-1"},
            {"type": "InternalIP", "address": "10.0.0.1"},
        ],
        "conditions": [
            {
                "type": "MemoryPressure",
                "status": "False",
                "reason": "KubeletHasSufficientMemory",
                "message": "kubelet has sufficient memory available",
            },
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": "x",
            },
        ],
        "images": [{"names": ["a"], "sizeBytes": 1}],
    },
}
