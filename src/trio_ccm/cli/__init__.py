"""The `trio-ccm` command. The only module with process-wide effects: logging configuration,
signal handling, exit codes.

    trio-ccm [flags]            the cloud-controller-manager (the Go CCM's flags; --help)
    trio-ccm apiserver|testbed|demo ...
                                the test tooling's commands (`trio_ccm_testbed.cli`),
                                imported only when one of them is asked for

Exit codes (docs/operations.md): 0 clean shutdown (or --help/--version); 1 a runtime
failure, an unusable --cloud-config or --kubeconfig, the Lease lost with
--exit-on-lost-lease, or a second signal forcing the shutdown; 2 a rejected command line.

Signals: the first SIGTERM/SIGINT asks for a graceful shutdown (drain while the Lease is
renewed, release it, exit 0); a second one stops everything at once, and the process exits
within `FORCED_EXIT_S` whatever cleanup is left (as the Go CCM exits on a second signal).
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import threading
import tracemalloc
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final

import prometheus_client
import structlog
import trio

from trio_ccm._version import __version__
from trio_ccm.actors.builtin import BUILTIN_CONTROLLERS
from trio_ccm.cli.flags import parse_flags, usage, wants_help, wants_version
from trio_ccm.cli.heap import serve_heap_trims, tune_malloc
from trio_ccm.cli.stalls import StallWatch
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.cloud.registry import available_providers, load_provider, read_cloud_config
from trio_ccm.errors import ConfigError
from trio_ccm.kube.leader import LeaseLostError
from trio_ccm.logs import configure_logging
from trio_ccm.settings import FlagError, Settings
from trio_ccm.supervisor import Serving, resolve_controllers, serve

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "SIGNALS",
    "Shutdown",
    "aclose_provider",
    "log_failures",
    "main",
    "usage_error",
    "watch_signals",
]

log = structlog.get_logger("trio_ccm.cli")

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2

SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
_COMMANDS_HELP: Final = """\
Commands (each has --help):
  trio-ccm apiserver   run the Kubernetes API emulator on loopback
  trio-ccm testbed     run the emulator, the simulated cloud and N simulated kubelets
  trio-ccm demo        run a testbed and the CCM in one process, with live progress"""
_CLEANUP_S: Final = 5.0  # deadline of shielded cleanup (closing the provider)
FORCED_EXIT_S: Final = 0.9
"""After a second signal, the process exits within this long, cleanup done or not."""
_TESTING_COMMANDS: Final = ("apiserver", "testbed", "demo")


def main(argv: Sequence[str] | None = None) -> int:
    """Run `trio-ccm` with `argv` (without the program name); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in _TESTING_COMMANDS:
        # Imported by name, so the controller manager never loads the test tooling.
        testing_cli = importlib.import_module("trio_ccm_testbed.cli")
        code: int = testing_cli.main(args)
        return code
    return run_ccm(args)


# -- small helpers ------------------------------------------------------------------------
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


def _log_lease_lost(group: BaseExceptionGroup[LeaseLostError]) -> None:
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
    with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_S):
        await aclose()


# -- `trio-ccm [flags]`: the controller manager ---------------------------------------------
def run_ccm(argv: Sequence[str]) -> int:
    """The cloud-controller-manager: flags, logging, provider, then `serve` until a signal."""
    if wants_help(argv):
        print(usage(providers=available_providers()))
        print()
        print(_COMMANDS_HELP)
        return EXIT_OK
    if wants_version(argv):
        print(f"trio-ccm {__version__}")
        return EXIT_OK
    try:
        # The provider may contribute controllers: their names are checked once it is built.
        settings = parse_flags(argv, controllers=None)
    except FlagError as exc:
        return usage_error(str(exc))
    configure_logging(verbosity=settings.verbosity, fmt=settings.logging_format, stream=sys.stderr)
    loaded = _load_provider(settings)
    if isinstance(loaded, int):
        return loaded
    try:
        contributed = getattr(loaded, "controllers", ()) or ()
        resolve_controllers(settings, BUILTIN_CONTROLLERS, list(contributed))
    except ConfigError as exc:
        return usage_error(str(exc))
    log.info("ccm.flags", version=__version__, settings=settings.configz()["settings"])
    for flag in settings.ignored_flags:
        log.warning(
            "flag.ignored",
            flag=flag,
            reason="accepted for compatibility with the Go cloud-controller-manager; "
            "it has no effect in trio-ccm (see docs/operations.md)",
        )
    return _run_until_signalled(settings, loaded)


def _load_provider(settings: Settings) -> CloudProvider | int:
    """The provider, or the exit code: 2 for a missing or unknown --cloud-provider (a flag
    problem), 1 for a --cloud-config the provider cannot use."""
    name = settings.cloud_provider
    if not name or name not in available_providers():
        try:
            load_provider(name, None)  # raises the registry's message for this case
        except ConfigError as exc:
            return usage_error(str(exc))
        raise AssertionError("load_provider accepted an unknown provider")  # pragma: no cover
    try:
        return load_provider(name, read_cloud_config(settings.cloud_config))
    except ConfigError as exc:
        message = str(exc)
        if settings.cloud_config and not message.startswith("--cloud-"):
            message = f"--cloud-config={settings.cloud_config}: {message}"
        print(f"trio-ccm: {message}", file=sys.stderr)
        return EXIT_FAILURE


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


def _exit_soon() -> None:
    """A second signal: whatever cleanup is left, the process ends within FORCED_EXIT_S."""

    def hard_exit() -> None:
        log.warning("ccm.exit", exit_code=EXIT_FAILURE, reason="forced by a second signal")
        os._exit(EXIT_FAILURE)

    timer = threading.Timer(FORCED_EXIT_S, hard_exit)
    timer.daemon = True
    timer.start()


def _process_registry() -> prometheus_client.CollectorRegistry:
    """The process's /metrics registry: upstream's series only (no `_created` twins, which
    client-go does not have), plus `process_*` as the Go CCM exports them."""
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.ProcessCollector(registry=registry)
    return registry


TRACEMALLOC_ENV: Final = "TRIO_CCM_TRACEMALLOC"
"""A debugging aid (docs/benchmarks.md, "Where the bytes go"): when set to a path prefix,
the process traces its allocations (one frame each) and writes a `tracemalloc` snapshot to
PREFIX-N.snapshot (N = 0, 1, ...) on each SIGUSR1. Tracing costs memory and CPU: never in
production."""


async def _serve_tracemalloc_snapshots(prefix: str) -> None:
    """Write a snapshot on each SIGUSR1 (until cancelled)."""
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            _write_snapshot(prefix)


def _write_snapshot(prefix: str) -> None:
    index = 0
    while os.path.exists(f"{prefix}-{index}.snapshot"):
        index += 1
    gc.collect()
    tracemalloc.take_snapshot().dump(f"{prefix}-{index}.snapshot")
    log.info("ccm.tracemalloc-snapshot", path=f"{prefix}-{index}.snapshot")


def _run_until_signalled(settings: Settings, provider: CloudProvider) -> int:
    shutdown = Shutdown()
    registry = _process_registry()
    snapshots = os.environ.get(TRACEMALLOC_ENV, "")
    if snapshots:
        tracemalloc.start(1)
    tune_malloc()  # large buffers mapped and unmapped, not left in the heap (trio_ccm.cli.heap)

    async def run() -> None:
        holder: list[Serving] = []
        try:
            with trio.open_signal_receiver(*SIGNALS) as signals:
                async with trio.open_nursery() as nursery:

                    async def replica(*, task_status: trio.TaskStatus[Serving]) -> None:
                        await serve(settings, provider, registry=registry, task_status=task_status)
                        nursery.cancel_scope.cancel()  # returned: stop watching signals

                    nursery.start_soon(
                        partial(
                            watch_signals,
                            signals,
                            shutdown,
                            lambda: holder[0] if holder else None,
                            nursery.cancel_scope,
                            on_force=_exit_soon,
                        )
                    )
                    if snapshots:
                        nursery.start_soon(_serve_tracemalloc_snapshots, snapshots)
                    nursery.start_soon(serve_heap_trims)
                    holder.append(await nursery.start(replica))
        finally:
            await aclose_provider(provider)

    code = EXIT_OK
    stalls = StallWatch()  # logs any step that holds the Trio thread for a second or more
    stalls.track_gc()
    try:
        trio.run(run, instruments=[stalls])
    except* LeaseLostError as group:
        _log_lease_lost(group)
        code = EXIT_FAILURE
    except* Exception as group:
        log_failures(group)
        code = EXIT_FAILURE
    finally:
        stalls.untrack_gc()
    if code == EXIT_OK and shutdown.forced:
        code = EXIT_FAILURE
    log.info("ccm.exit", exit_code=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
