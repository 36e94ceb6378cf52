"""trio-ccm: a Kubernetes cloud-controller-manager on Trio.

The public facade grows with the controllers; for now: the version and the error root.
"""

from trio_ccm._version import __version__
from trio_ccm.errors import CcmError, ConfigError, RetryAfter

__all__ = ["CcmError", "ConfigError", "RetryAfter", "__version__"]
