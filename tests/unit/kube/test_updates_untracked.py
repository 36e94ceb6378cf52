"""What subscriptions and actors carry (Changed, Gone, Reverify) is not tracked by the
garbage collector, as the cached objects it wraps are not: a full collection never walks
the hundreds of thousands of them a term's first fill holds."""

from __future__ import annotations

import gc

import msgspec
import pytest

from trio_ccm.actors.keyed import Reverify
from trio_ccm.kube.informer import Changed, Gone
from trio_ccm.kube.objects import Node
from trio_ccm.testing.factories import make_node

NODE = msgspec.convert(make_node("node-a"), Node)


@pytest.mark.parametrize(
    "update",
    [
        pytest.param(Changed(NODE), id="changed"),
        pytest.param(Gone(NODE), id="gone"),
        pytest.param(Gone(), id="gone-unknown"),
        pytest.param(Reverify(NODE), id="reverify"),
    ],
)
def test_an_update_is_not_tracked(update: object) -> None:
    """Neither the update nor the cached Node it holds is tracked by the collector."""
    assert not gc.is_tracked(NODE)
    assert not gc.is_tracked(update)


def test_updates_compare_and_match_as_before() -> None:
    """Equal updates compare equal; a match on the class binds the object."""
    assert Changed(NODE) == Changed(NODE)
    assert Changed(NODE) != Changed(msgspec.convert(make_node("node-b"), Node))
    match Changed(NODE):
        case Changed(obj=node):
            assert node is NODE
        case _:
            pytest.fail("Changed did not match")
