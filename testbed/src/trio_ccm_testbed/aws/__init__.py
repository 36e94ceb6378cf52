"""The aws test world: moto on loopback, faults in front of it, and a cluster built on it.

For tests, `trio-ccm testbed --cloud=aws` and `demo --cloud=aws` (needs the `aws-testbed`
extra: moto is not in the runtime image):

```python
from trio_ccm_testbed.aws import World, open_moto

async with open_moto() as moto:                     # moto on 127.0.0.1:<free port>
    world = await World.create(moto, cluster_id="demo")
    instances = await world.add_instances(50)       # named by private DNS name
    config = world.cloud_config()                   # bytes for --cloud-config
    environ = world.environ()                       # moto's test keys, IMDS off
    for instance in instances:
        api.create(World.node_manifest(instance))   # the kubelets' Nodes
    moto.faults.throttle("DescribeInstances", times=3)
```

- `MotoServer` / `open_moto()`: moto in a thread, reset per test (`reset()`), auth mode
  (`auth_mode(actions)`) where signatures are verified;
- `Faults` (`moto.faults`): throttling (both codes), 5xx, latency, garbage bodies, and
  per-action call counters;
- `apply_patches()`: moto fidelity patches (`patches.PATCHES`, listed in docs/aws.md);
- `World`: the cluster (VPC, a subnet per zone, route table, instances) and its
  cloud-config;
- `MotoFleet`: the world's instances as the testbed's kubelets follow them.

Runtime modules never import this package (import-linter enforces it).
"""

from trio_ccm_testbed.aws.faults import HARNESS_AGENT, Fault, Faults
from trio_ccm_testbed.aws.fleet import MotoFleet
from trio_ccm_testbed.aws.patches import PATCHES, apply_patches
from trio_ccm_testbed.aws.server import TEST_CREDENTIALS, MotoServer, StaticKeys, open_moto
from trio_ccm_testbed.aws.world import (
    UNINITIALIZED_TAINT,
    Balancing,
    Instance,
    World,
    balancing,
    certificate,
    ready_condition,
)

__all__ = [
    "HARNESS_AGENT",
    "PATCHES",
    "TEST_CREDENTIALS",
    "UNINITIALIZED_TAINT",
    "Balancing",
    "Fault",
    "Faults",
    "Instance",
    "MotoFleet",
    "MotoServer",
    "StaticKeys",
    "World",
    "apply_patches",
    "balancing",
    "certificate",
    "open_moto",
    "ready_condition",
]
