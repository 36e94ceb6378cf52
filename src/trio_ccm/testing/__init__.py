"""The public test kit for provider authors, embedders and this project's own suite.
Runtime modules never import this package (import-linter holds it).

The test world itself (the emulator, the simulated cloud, the moto world, the testbed,
chaos) is its own distribution, trio-ccm-testbed (`trio_ccm_testbed`): this kit imports it
when it is installed (`pip install 'trio-ccm[testing]'`) and says so when it is not.

- `ApiServer` (`trio_ccm_testbed.apiserver`): the Kubernetes API emulator, in-process
  (`api.transport()`, MockClock-safe) or served over HTTP(S) for kubectl.
- `SimCloud` (`trio_ccm_testbed.cloud`): the simulated cloud behind the `sim` provider.
- `run_ccm`, `register_node`, `RecordingTransport`, `virtual_now`, `wait_for`, `EPOCH`,
  `emulator_connection` (`trio_ccm.testing.harness`): the whole CCM in-process against the
  emulator, under `trio.testing.MockClock`.
- `make_node`, `make_service`, `make_lease`, `ready_condition`, `lb_name`,
  `TAINT_UNINITIALIZED` (`trio_ccm.testing.factories`): objects as their owners write them.
- `trio_ccm.testing.plugin`: pytest fixtures over all of these (`api`, `kubelet`, `ccm`,
  `sim_cloud`, ...), enabled with `pytest_plugins = ["trio_ccm.testing.plugin"]`;
  docs/providers.md walks through a provider's first test with them.

Names are imported on first use, so `import trio_ccm.testing` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trio_ccm.testing.factories import (
        TAINT_UNINITIALIZED,
        lb_name,
        make_lease,
        make_node,
        make_service,
        ready_condition,
    )
    from trio_ccm.testing.harness import (
        EPOCH,
        RecordingTransport,
        emulator_connection,
        register_node,
        run_ccm,
        virtual_now,
        wait_for,
    )
    from trio_ccm_testbed.apiserver import ApiServer
    from trio_ccm_testbed.cloud import SimCloud

__all__ = [
    "EPOCH",
    "TAINT_UNINITIALIZED",
    "ApiServer",
    "RecordingTransport",
    "SimCloud",
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
]

_LAZY = {
    "ApiServer": "trio_ccm.testing._world",
    "SimCloud": "trio_ccm.testing._world",
    "TAINT_UNINITIALIZED": "trio_ccm.testing.factories",
    "lb_name": "trio_ccm.testing.factories",
    "ready_condition": "trio_ccm.testing.factories",
    "make_lease": "trio_ccm.testing.factories",
    "make_node": "trio_ccm.testing.factories",
    "make_service": "trio_ccm.testing.factories",
    "EPOCH": "trio_ccm.testing.harness",
    "RecordingTransport": "trio_ccm.testing.harness",
    "emulator_connection": "trio_ccm.testing.harness",
    "register_node": "trio_ccm.testing.harness",
    "run_ccm": "trio_ccm.testing.harness",
    "virtual_now": "trio_ccm.testing.harness",
    "wait_for": "trio_ccm.testing.harness",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trio_ccm.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
