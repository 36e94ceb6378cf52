"""trio-ccm: a Kubernetes cloud-controller-manager on Trio.

The public facade grows with the controllers; for now it carries the version.
"""

from trio_ccm._version import __version__

__all__ = ["__version__"]
