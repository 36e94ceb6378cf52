"""`trio-ccm [flags]`: the cloud-controller-manager run. Flags, logging, the provider, then
`serve` until a signal (`trio_ccm.cli.process` has the exit codes and signal handling)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import tracemalloc
from collections.abc import Sequence
from functools import partial
from typing import Final

import prometheus_client
import structlog
import trio

from trio_ccm._version import __version__
from trio_ccm.actors.builtin import BUILTIN_CONTROLLERS
from trio_ccm.cli.flags import parse_flags, usage, wants_help, wants_version
from trio_ccm.cli.heap import (
    heap_report,
    serve_collector_freezes,
    serve_heap_trims,
    tune_malloc,
)
from trio_ccm.cli.process import (
    EXIT_FAILURE,
    EXIT_OK,
    SIGNALS,
    Shutdown,
    aclose_provider,
    exit_soon,
    log_failures,
    log_lease_lost,
    usage_error,
    watch_signals,
)
from trio_ccm.cli.stalls import StallWatch
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.cloud.registry import available_providers, load_provider, read_cloud_config
from trio_ccm.errors import ConfigError
from trio_ccm.kube.leader import LeaseLostError
from trio_ccm.logs import configure_logging
from trio_ccm.settings import FlagError, Settings
from trio_ccm.supervisor import Serving, resolve_controllers, serve

__all__ = ["HEAP_REPORT_ENV", "TRACEMALLOC_ENV", "run_ccm"]

log = structlog.get_logger("trio_ccm.cli")


def run_ccm(argv: Sequence[str], *, commands_help: str = "") -> int:
    """The cloud-controller-manager: flags, logging, provider, then `serve` until a signal."""
    if wants_help(argv):
        print(usage(providers=available_providers()))
        if commands_help:
            print()
            print(commands_help)
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
PREFIX-N.snapshot (N = 0, 1, ...) on each SIGUSR1, with a heap report beside it
(PREFIX-N.heap, below). Tracing costs memory and CPU: never in production."""
HEAP_REPORT_ENV: Final = "TRIO_CCM_HEAP_REPORT"
"""A debugging aid without tracing: when set to a path prefix, each SIGUSR1 writes
`heap.heap_report()` (glibc's and pymalloc's statistics, object counts by type) to
PREFIX-N.heap."""


async def _serve_debug_dumps(snapshots: str, reports: str) -> None:
    """On each SIGUSR1, a tracemalloc snapshot and/or a heap report (until cancelled)."""
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            _write_dumps(snapshots, reports)


def _next_free(prefix: str, suffix: str) -> str:
    index = 0
    while os.path.exists(f"{prefix}-{index}{suffix}"):
        index += 1
    return f"{prefix}-{index}{suffix}"


def _write_dumps(snapshots: str, reports: str) -> None:
    if snapshots:
        gc.collect()
        path = _next_free(snapshots, ".snapshot")
        tracemalloc.take_snapshot().dump(path)
        log.info("ccm.tracemalloc-snapshot", path=path)
    if prefix := reports or snapshots:
        path = _next_free(prefix, ".heap")
        with open(path, "w", encoding="utf-8") as out:
            out.write(heap_report())
        log.info("ccm.heap-report", path=path)


def _run_until_signalled(settings: Settings, provider: CloudProvider) -> int:
    shutdown = Shutdown()
    registry = _process_registry()
    snapshots = os.environ.get(TRACEMALLOC_ENV, "")
    reports = os.environ.get(HEAP_REPORT_ENV, "")
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
                            on_force=exit_soon,
                        )
                    )
                    if snapshots or reports:
                        nursery.start_soon(_serve_debug_dumps, snapshots, reports)
                    nursery.start_soon(serve_heap_trims)
                    holder.append(await nursery.start(replica))
                    nursery.start_soon(serve_collector_freezes, holder[0])
        finally:
            await aclose_provider(provider)

    code = EXIT_OK
    stalls = StallWatch()  # logs any step that holds the Trio thread for a second or more
    stalls.track_gc()
    try:
        trio.run(run, instruments=[stalls])
    except* LeaseLostError as group:
        log_lease_lost(group)
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
