"""The kinds the emulator serves, one module per API group (core/v1 in two).

`standard_types` lists every stored kind; `REVIEW_TYPES` the computed, never-stored ones.
"""

from __future__ import annotations

from trio_ccm_testbed.apiserver.kinds import apps, coordination, core, events, rbac, services
from trio_ccm_testbed.apiserver.kinds.base import ResourceType, ReviewType, Strategy
from trio_ccm_testbed.apiserver.kinds.reviews import REVIEW_TYPES
from trio_ccm_testbed.apiserver.kinds.services import ServiceAllocator

__all__ = [
    "REVIEW_TYPES",
    "ResourceType",
    "ReviewType",
    "ServiceAllocator",
    "Strategy",
    "standard_types",
]


def standard_types(allocator: ServiceAllocator) -> list[ResourceType]:
    """Every stored kind the emulator serves, in discovery order within each group."""
    core_types = core.types()
    return [
        *core_types[:2],  # Namespace, Node
        *services.types(allocator),
        *core_types[2:],
        *events.types(),
        *coordination.types(),
        *rbac.types(),
        *apps.types(),
    ]
