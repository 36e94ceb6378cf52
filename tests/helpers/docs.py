"""Code in the docs, run as tests: its blocks, and whether it imports public names only."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Final

DOCS: Final = Path(__file__).parents[2] / "docs"

PUBLIC_MODULES: Final = (
    "trio_ccm",
    "trio_ccm.cloud",
    "trio_ccm.cloud.sim",
    "trio_ccm.controllers",
    "trio_ccm.testing",
    "trio_ccm_testbed.apiserver",
    "trio_ccm_testbed.cloud",
    "trio_ccm.testing.factories",
    "trio_ccm.testing.harness",
    "trio_ccm.testing.plugin",
)
"""The modules whose `__all__` is the public surface (pinned by tests/unit/test_public_api.py)."""


def blocks(doc: str, language: str = "python") -> list[str]:
    """The fenced code blocks of `docs/<doc>` in `language`, in order."""
    text = (DOCS / doc).read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def private_imports(code: str) -> list[str]:
    """What `code` imports from trio_ccm beyond the public modules' `__all__`
    ("module.name" or "module"), in order; third-party imports are not its business."""
    found: list[str] = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found += [
                a.name
                for a in node.names
                if a.name.split(".")[0] == "trio_ccm" and a.name not in PUBLIC_MODULES
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "trio_ccm":
            module = node.module or ""
            if module not in PUBLIC_MODULES:
                found.append(module)
                continue
            exported = importlib.import_module(module).__all__
            found += [f"{module}.{a.name}" for a in node.names if a.name not in exported]
    return found


def walkthrough_files(doc: str) -> dict[str, str]:
    """The files a walkthrough in `docs/<doc>` builds: each fenced block whose first line is
    `# file: NAME`, by NAME (the marker line stays: a comment in Python and TOML)."""
    text = (DOCS / doc).read_text()
    found: dict[str, str] = {}
    for code in re.findall(r"```[a-z]*\n(# file: .*?)```", text, re.S):
        name = code.split("\n", 1)[0].removeprefix("# file: ").strip()
        found[name] = code
    return found
