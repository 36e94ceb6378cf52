"""What the benchmark scripts share: quiet logging, the in-process connection, a counting
transport in front of the emulator, process figures (peak and current RSS, CPU), metric sums
and the JSON line every benchmark ends with (docs/benchmarks.md, "Convention").

The scripts run as `python bench/NAME.py`, so `bench/` is on `sys.path` and they import this
module as `_common`. Nothing here measures anything by itself.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import re
import resource
import sys
import time
from collections import Counter
from collections.abc import MutableMapping
from typing import Any, Final

import httpx
import prometheus_client
import structlog
import trio

from trio_ccm.kube.config import ConnectionConfig, StaticCredentials

_AGENT: Final = re.compile(r"\(([^)]*)\)")
_NODE: Final = re.compile(r"^/api/v1/nodes/([^/]+)(/status)?$")
_SERVICE: Final = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/]+)(/status)?$")
_EVENT: Final = re.compile(r"^/api/v1/namespaces/[^/]+/events(/[^/]+)?$")
_WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_PAGE: Final = os.sysconf("SC_PAGE_SIZE")
_LEVELS: Final = {  # structlog's method names -> logging levels
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


# -- logging ----------------------------------------------------------------------------------
class LogCounter:
    """A structlog processor: counts every event name, then drops what is below `level`."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.counts: Counter[str] = Counter()

    def __call__(
        self, _logger: object, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        self.counts[str(event_dict.get("event", ""))] += 1
        if _LEVELS.get(method, logging.INFO) < self.level:
            raise structlog.DropEvent
        return event_dict


def quiet_logging(level: str = "warning") -> LogCounter:
    """The benchmark's own choice (library code never configures logging): lines at `level`
    and above go to stderr, so stdout holds only the figures; every event name is counted."""
    counter = LogCounter(logging.getLevelNamesMapping()[level.upper()])
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server, in bench/aws.py
    structlog.configure(
        processors=[
            counter,
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(min(logging.INFO, counter.level)),
        cache_logger_on_first_use=False,
    )
    return counter


# -- the emulator in this process ---------------------------------------------------------------
def emulator_connection() -> ConnectionConfig:
    """How a replica in this process reaches the emulator through a transport (no socket)."""
    return ConnectionConfig(
        server="http://emulator", credentials=StaticCredentials(), source="bench emulator"
    )


class CountingTransport(httpx.AsyncBaseTransport):
    """A replica's way to the emulator: counts its requests by client (the user agent's
    component) and kind, its failed writes by status and its Event writes, then hands each
    successful write's answer to `answered` (override it to read what was written)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: Counter[tuple[str, str]] = Counter()  # (client, what)
        self.failed_writes: Counter[int] = Counter()  # by status code
        self.node_writes: Counter[tuple[str, bool]] = Counter()  # (Node, status?)
        self.event_writes = 0
        self.last_event_at = -math.inf

    def answered(self, kind: str, match: re.Match[str], body: bytes) -> None:
        """A write of `kind` ("node", "node/status", "service", "service/status") succeeded
        with `body`; `match` holds the path's names."""

    def reads_answers(self, kind: str) -> bool:
        """Whether `answered` wants the bodies of successful writes of `kind`."""
        return False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        agent = _AGENT.search(request.headers.get("user-agent", ""))
        client = agent.group(1) if agent else "?"
        write = method in _WRITES
        kind, match = "", None
        if write and (match := _NODE.match(path)):
            kind = "node/status" if match.group(2) else "node"
            self.node_writes[(match.group(1), bool(match.group(2)))] += 1
        elif write and (match := _SERVICE.match(path)):
            kind = "service/status" if match.group(3) else "service"
        elif write and _EVENT.match(path):
            kind = "event"
            self.event_writes += 1
        what = f"{method} {kind}" if kind else f"{method} {path}"
        if not kind and "watch=" in str(request.url.query):
            what = f"{method} watch {path}"
        self.requests[(client, what)] += 1
        response = await self.inner.handle_async_request(request)
        if write and response.status_code >= 300:
            self.failed_writes[response.status_code] += 1
        if kind == "event":
            self.last_event_at = trio.current_time()
        elif match is not None and response.status_code < 300 and self.reads_answers(kind):
            self.answered(kind, match, await response.aread())
        return response

    def writes_of_nodes(self) -> int:
        return sum(self.node_writes.values())

    def request_counts(self) -> dict[str, int]:
        return {f"{c} {w}": n for (c, w), n in sorted(self.requests.items())}


# -- process figures --------------------------------------------------------------------------
def peak_rss_mb() -> float:
    """This process's peak RSS so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_bytes(pid: int | str = "self") -> int:
    """The current RSS of a process (this one by default), from /proc."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU time of a process so far, from /proc (clock ticks)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric_sum(registry: prometheus_client.CollectorRegistry, name: str) -> float:
    """The sum of every sample called `name` (all label sets) in `registry`."""
    return sum(
        sample.value
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == name
    )


def python_version() -> str:
    return platform.python_version()


def machine_line() -> str:
    return f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores"


def machine_speed_ms(repeats: int = 3) -> float:
    """This process's CPU milliseconds for a fixed pure-Python workload (dict stores of new
    strings; the best of `repeats`): a measure of how fast the machine is being right now,
    to print beside a figure taken at the same moment. About 20 ms on a quiet machine here."""
    best = math.inf
    for _ in range(repeats):
        began = time.process_time()
        table: dict[int, str] = {}
        for i in range(100_000):
            table[i & 1023] = str(i)
        best = min(best, time.process_time() - began)
    return best * 1000


# -- the figures --------------------------------------------------------------------------------
def print_figures(figures: dict[str, Any]) -> None:
    """The benchmark's last line of output: one JSON object with its figures."""
    sys.stdout.flush()
    print(json.dumps(figures), flush=True)
