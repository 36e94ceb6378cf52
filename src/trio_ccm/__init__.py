"""trio-ccm: a Kubernetes cloud-controller-manager on Trio.

The public facade: `serve()`, its `Settings` and `parse_flags`, `configure_logging`, the
extra-controller contract (`Controller`, `ControllerContext`), the errors and the version.
The cloud provider protocols live in `trio_ccm.cloud`, everything else an extra controller
needs in `trio_ccm.controllers`, the test harness in `trio_ccm.testing`. `serve` and friends
are imported on first use, so `import trio_ccm.errors` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from trio_ccm._version import __version__
from trio_ccm.errors import CcmError, ConfigError, RetryAfter

if TYPE_CHECKING:
    from trio_ccm.actors.controller import Controller, ControllerContext
    from trio_ccm.cli.flags import parse_flags
    from trio_ccm.logs import configure_logging
    from trio_ccm.settings import Settings
    from trio_ccm.supervisor import Serving, serve

__all__ = [
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
]

_LAZY = {
    "Controller": "trio_ccm.actors.controller",
    "ControllerContext": "trio_ccm.actors.controller",
    "Serving": "trio_ccm.supervisor",
    "configure_logging": "trio_ccm.logs",
    "Settings": "trio_ccm.settings",
    "parse_flags": "trio_ccm.cli.flags",
    "serve": "trio_ccm.supervisor",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trio_ccm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
