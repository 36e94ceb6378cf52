"""The `trio-ccm` command. The only package of the runtime with process-wide effects (logging
configuration, signal handling, exit codes).

    trio-ccm [flags]            the cloud-controller-manager (the Go CCM's flags; --help)
    trio-ccm COMMAND ...        a command another installed package registers in the
                                `trio_ccm.commands` entry point group: the test world
                                (trio-ccm-testbed) registers `apiserver`, `testbed`, `demo`

The modules: `process` (exit codes, signals, `Shutdown`, failure logging, shared by every
command), `ccm` (the controller manager's run), `flags` (the Go CCM's command line),
`heap` (malloc tuning), `stalls` (the stall watch). A registered command is imported only
when it is asked for, so the controller manager never loads the test world.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Final, cast

from trio_ccm.cli.ccm import run_ccm
from trio_ccm.cli.process import usage_error

__all__ = ["COMMANDS_GROUP", "commands", "main"]

COMMANDS_GROUP: Final = "trio_ccm.commands"
"""The entry point group of `trio-ccm` sub-commands: NAME = "module:function", where the
function takes the arguments after NAME and returns the exit code."""

TEST_WORLD_COMMANDS: Final = ("apiserver", "testbed", "demo")
"""The commands trio-ccm-testbed registers: asked for without it, they get an install hint
rather than being read as CCM flags."""


def commands() -> dict[str, EntryPoint]:
    """The registered sub-commands, by name (none are imported)."""
    return {entry.name: entry for entry in entry_points(group=COMMANDS_GROUP)}


def main(argv: Sequence[str] | None = None) -> int:
    """Run `trio-ccm` with `argv` (without the program name); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    registered = commands()
    if args and args[0] in registered:
        command = cast(Callable[[Sequence[str]], int], registered[args[0]].load())
        return command(args[1:])
    if args and args[0] in TEST_WORLD_COMMANDS:
        return usage_error(
            f"'{args[0]}' is a command of the test world, which is not installed: "
            "pip install 'trio-ccm[testing]' (or, from a clone, make demo)"
        )
    return run_ccm(args, commands_help=_commands_help(registered))


def _commands_help(registered: dict[str, EntryPoint]) -> str:
    if not registered:
        return (
            "Commands: none installed (`pip install 'trio-ccm[testing]'` adds apiserver, "
            "testbed and demo)"
        )
    lines = ["Commands (each has --help):"]
    for name, entry in sorted(registered.items()):
        source = f"   (from {entry.dist.name})" if entry.dist is not None else ""
        lines.append(f"  trio-ccm {name:<10}{source}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
