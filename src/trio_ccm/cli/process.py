"""The process plumbing every `trio-ccm` command shares (the CCM run here, the test world's
commands in `trio_ccm_testbed.cli`): exit codes, signals, the shutdown record, failure
logging. Process-wide effects live in `trio_ccm.cli` and nowhere else in the runtime.

Exit codes (docs/operations.md): 0 clean shutdown (or --help/--version); 1 a runtime
failure, an unusable --cloud-config or --kubeconfig, the Lease lost with
--exit-on-lost-lease, or a second signal forcing the shutdown; 2 a rejected command line.

Signals: the first SIGTERM/SIGINT asks for a graceful shutdown (drain while the Lease is
renewed, release it, exit 0); a second one stops everything at once, and the process exits
within `FORCED_EXIT_S` whatever cleanup is left (as the Go CCM exits on a second signal).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import structlog
import trio

from trio_ccm.errors import ConfigError
from trio_ccm.kube.leader import LeaseLostError

if TYPE_CHECKING:
    from trio_ccm.cloud.provider import CloudProvider
    from trio_ccm.supervisor import Serving

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "FORCED_EXIT_S",
    "SIGNALS",
    "Shutdown",
    "aclose_provider",
    "exit_soon",
    "log_failures",
    "log_lease_lost",
    "usage_error",
    "watch_signals",
]

log = structlog.get_logger("trio_ccm.cli")

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2

SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
CLEANUP_S: Final = 5.0
"""Deadline of shielded cleanup (closing the provider)."""
FORCED_EXIT_S: Final = 0.9
"""After a second signal, the process exits within this long, cleanup done or not."""


def usage_error(message: str, *, command: str = "") -> int:
    """A rejected command line: the message, how to get help, exit 2."""
    prog = f"trio-ccm {command}".strip()
    print(f"trio-ccm: {message}", file=sys.stderr)
    print(f"Run '{prog} --help' for usage.", file=sys.stderr)
    return EXIT_USAGE


def log_failures(group: BaseExceptionGroup[Exception]) -> None:
    """Log each leaf exception once: config problems as one line, the rest with a traceback."""
    for exc in _leaves(group):
        if isinstance(exc, ConfigError):
            log.error("ccm.failed", error=str(exc))
        else:
            log.error("ccm.failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)


def log_lease_lost(group: BaseExceptionGroup[LeaseLostError]) -> None:
    """--exit-on-lost-lease: one error line, no traceback (it is no bug)."""
    for exc in _leaves(group):
        log.error("ccm.lease-lost", error=str(exc), exit_code=EXIT_FAILURE)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def aclose_provider(provider: CloudProvider) -> None:
    """Close the provider if it can be closed (`aclose`), shielded and under a deadline."""
    aclose = getattr(provider, "aclose", None)
    if aclose is None:
        return
    with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_S):
        await aclose()


@dataclass
class Shutdown:
    """How the process was asked to stop."""

    signals: int = 0
    forced: bool = False


async def watch_signals(
    signals: AsyncIterator[int],
    shutdown: Shutdown,
    serving: Callable[[], Serving | None],
    cancel_scope: trio.CancelScope,
    *,
    announce: Callable[[str], None] | None = None,
    on_force: Callable[[], None] | None = None,
) -> None:
    """First SIGTERM/SIGINT: graceful shutdown; a second one: stop everything at once (the
    replica stops acting first), then `on_force()` (the process arms its exit deadline)."""
    async for signum in signals:
        shutdown.signals += 1
        name = signal.Signals(signum).name
        current = serving()
        if shutdown.signals == 1 and current is not None:
            log.info("ccm.signal", signal=name, action="graceful shutdown (again to force)")
            if announce is not None:
                announce(f"received {name}: stopping the CCM (again to force)")
            current.shut_down()
        else:
            log.warning("ccm.signal", signal=name, action="stopping at once")
            if announce is not None:
                announce(f"received {name}: stopping at once")
            shutdown.forced = shutdown.signals > 1
            if current is not None:
                current.shut_down(force=True)
            cancel_scope.cancel()
            if shutdown.forced and on_force is not None:
                on_force()
            return


def exit_soon() -> None:
    """A second signal: whatever cleanup is left, the process ends within FORCED_EXIT_S."""

    def hard_exit() -> None:
        log.warning("ccm.exit", exit_code=EXIT_FAILURE, reason="forced by a second signal")
        os._exit(EXIT_FAILURE)

    timer = threading.Timer(FORCED_EXIT_S, hard_exit)
    timer.daemon = True
    timer.start()
