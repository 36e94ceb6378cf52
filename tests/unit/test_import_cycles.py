"""No two modules of the runtime or the test world import each other, directly or through
others (import-linter's layers hold packages apart; this holds modules inside them)."""

from __future__ import annotations

import grimp

# Loops allowed for now: none (the aws credentials <-> imds loop went with the credential
# errors' move to cloud/aws/errors.py).
KNOWN: set[tuple[str, ...]] = set()


def test_no_module_import_cycles() -> None:
    """Every direct import A -> B has no chain back from B to A (TYPE_CHECKING imports
    included: a type-only loop still ties two modules together)."""
    graph = grimp.build_graph("trio_ccm", "trio_ccm_testbed")
    cycles = {
        tuple(sorted((module, imported)))
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.find_shortest_chain(importer=imported, imported=module)
    }
    assert cycles - KNOWN == set()
