"""The exception tree drawn in trio_ccm.errors is the code's: every CcmError subclass of the
runtime (providers' own subtrees aside) is drawn, under its real parent."""

from __future__ import annotations

import importlib
import pkgutil
import re

import trio_ccm
from trio_ccm import errors
from trio_ccm.errors import CcmError

PROVIDERS = ("trio_ccm.cloud.aws", "trio_ccm.cloud.sim", "trio_ccm.cloud.openstack")


def drawn() -> dict[str, str]:
    """Class name -> parent name, read off the docstring's tree by indentation."""
    doc = errors.__doc__ or ""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        match = re.match(r"^(\s*(?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+)(?:\s|$)", line)
        if match is None or not line.startswith("    "):
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        name = match.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def runtime_errors() -> dict[str, str]:
    """Class name -> parent name for every CcmError subclass defined in the runtime."""
    found: dict[str, str] = {}
    for info in pkgutil.walk_packages(trio_ccm.__path__, "trio_ccm."):
        if info.name.startswith((*PROVIDERS, "trio_ccm.testing", "trio_ccm.__main__")):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, CcmError)
                and value is not CcmError
                and value.__module__ == info.name
            ):
                found[value.__name__] = value.__bases__[0].__name__
    return found


def test_the_drawn_tree_is_the_code() -> None:
    """Each runtime error appears in the drawing under its first base class, and the
    drawing names no class that does not exist."""
    assert drawn() == runtime_errors()
