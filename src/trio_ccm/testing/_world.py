"""The test world, as the public kit uses it: the one place `trio_ccm.testing` imports
trio-ccm-testbed, so a missing install fails with the fix rather than a bare
ModuleNotFoundError."""

from __future__ import annotations

from typing import Final

NOT_INSTALLED: Final = (
    "trio_ccm.testing needs the test world (the Kubernetes API emulator and the simulated "
    "cloud, distribution trio-ccm-testbed), which is not installed: "
    "pip install 'trio-ccm[testing]'"
)

try:
    from trio_ccm_testbed.apiserver import ApiServer
    from trio_ccm_testbed.cloud import SimCloud
    from trio_ccm_testbed.cloud.model import JSON, Call
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess
    if not (exc.name or "").startswith("trio_ccm_testbed"):
        raise
    raise ModuleNotFoundError(NOT_INSTALLED, name=exc.name) from exc

__all__ = ["JSON", "NOT_INSTALLED", "ApiServer", "Call", "SimCloud"]
