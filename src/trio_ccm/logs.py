"""trio-ccm's logging: the configuration the cli applies, and the library's loggers.

`configure_logging` (public: `trio_ccm.configure_logging`) is the `trio-ccm` command's
configuration, for embedding programs that want the same lines: structlog events and
stdlib `logging` records (hypercorn, httpx) go through the same processors to one stream,
JSON lines off a TTY (or with `fmt="json"`), colourless or coloured console lines otherwise.
Every line carries `event`, `level` and an ISO-8601 UTC `timestamp`, plus whatever
`structlog.contextvars` holds (`controller`, `key`). Tracebacks never show local variables.

Library modules log through `get_logger(name)`, and never configure anything:

- when the program configured structlog (`structlog.configure`, or `configure_logging`),
  the lines go through that configuration, as any `structlog.get_logger()` line would;
- otherwise they become stdlib `logging` records of the logger `name` (`trio_ccm.…`), one
  line each, their traceback (if any) plain, without local variables: a program that set
  up `logging` gets them in its handlers like any library's records, and one that set up
  nothing gets Python's default, warnings and errors on stderr (`logging.lastResort`).

structlog's own default would instead print every level, with tracebacks that list each
frame's local variables: thousands of lines a minute for one failing object.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Final, TextIO, cast

import structlog
from structlog.typing import Processor

from trio_ccm.errors import ConfigError

__all__ = ["configure_logging", "get_logger"]

# Third-party loggers whose info/debug chatter is not ours to show, even at -v=1.
_QUIET_LOGGERS: Final = ("hypercorn", "httpx", "httpcore", "hpack", "h2", "h11")


class _StreamHandler(logging.StreamHandler[TextIO]):
    """The root handler configure_logging installs; its class finds it again on a second call."""


def configure_logging(*, verbosity: int = 0, fmt: str = "", stream: TextIO | None = None) -> None:
    """Send structlog and stdlib logging to `stream` (stderr by default) at info
    (`verbosity` 0) or debug (>= 1), as the `trio-ccm` command does.

    `fmt` is "json", "text", or "" for json unless `stream` is a TTY. Calling it again
    replaces the previous configuration. It configures the whole process (the root logger
    and structlog): call it from a program's `main`, not from a library.
    """
    if stream is None:
        stream = sys.stderr
    if fmt not in ("", "text", "json"):
        raise ConfigError(f"--logging-format={fmt}: write text or json")
    level = logging.DEBUG if verbosity >= 1 else logging.INFO
    tty = _isatty(stream)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: list[Processor]
    if fmt == "json" or (fmt == "" and not tty):
        # Tracebacks without local variables: those may hold tokens.
        tracebacks = structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        )
        renderer = [tracebacks, structlog.processors.JSONRenderer()]
    else:
        renderer = [
            structlog.dev.ConsoleRenderer(
                colors=tty, exception_formatter=structlog.dev.plain_traceback
            )
        ]

    handler = _StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StreamHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)

    # structlog's own events are rendered here and written by the handler's stream under
    # its lock: the same line as through the formatter, without the stdlib record path (a
    # LogRecord made twice, the caller's frame looked up), which cost 80 µs a line, a tenth
    # of the CCM's CPU in a Node wave (docs/benchmarks.md, the seventh pass).
    structlog.configure(
        processors=[*shared, *renderer],
        logger_factory=_LineWriterFactory(handler),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        context_class=dict,
        # Off so that a second call (and structlog.testing.capture_logs) takes effect on
        # module-level loggers already used.
        cache_logger_on_first_use=False,
    )


class _LineWriter:
    """structlog's logger under `configure_logging`: writes each rendered line to the root
    handler's stream, as the handler would (its lock, its terminator, a flush a line)."""

    __slots__ = ("_handler", "name")

    def __init__(self, handler: _StreamHandler, name: str) -> None:
        self._handler = handler
        self.name = name  # `add_logger_name` reads it

    def msg(self, line: str) -> None:
        handler = self._handler
        handler.acquire()
        try:
            handler.stream.write(line + handler.terminator)
            handler.flush()
        except Exception:  # as logging.Handler.emit: a log line never raises
            handler.handleError(logging.makeLogRecord({"msg": line}))
        finally:
            handler.release()

    debug = info = warning = error = critical = exception = fatal = log = msg


class _LineWriterFactory:
    """A `_LineWriter` per logger name, for one handler."""

    def __init__(self, handler: _StreamHandler) -> None:
        self._handler = handler

    def __call__(self, *args: Any) -> _LineWriter:
        if args and isinstance(args[0], str):
            name = args[0]
        else:  # `structlog.get_logger()`: named after its caller's module, as stdlib's factory
            name = structlog.stdlib.LoggerFactory(ignore_frame_names=[__name__])(*args).name
        return _LineWriter(self._handler, name)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _LibraryLogger:
    """A module's logger: the program's structlog configuration if it made one, else stdlib
    logging under the module's name (see the module docstring). Decided at each call, so a
    configuration made after import (or swapped by a test) takes effect."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._configured = structlog.get_logger(name)

    def _target(self) -> Any:
        if structlog.is_configured():
            return self._configured
        return structlog.wrap_logger(
            logging.getLogger(self._name),
            processors=_LIBRARY_DEFAULT,
            wrapper_class=structlog.stdlib.BoundLogger,
            context_class=dict,
        )

    def __getattr__(self, method: str) -> Any:
        return getattr(self._target(), method)


_LIBRARY_DEFAULT: Final[tuple[Processor, ...]] = (
    structlog.stdlib.filter_by_level,  # before any work: below the logger's level is free
    structlog.contextvars.merge_contextvars,
    # No level or time: the program's logging handler adds what it wants.
    structlog.dev.ConsoleRenderer(
        colors=False,
        exception_formatter=structlog.dev.plain_traceback,
        pad_event_to=0,
        pad_level=False,
    ),
)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """The logger of library module `name`; see the module docstring."""
    return cast("structlog.typing.FilteringBoundLogger", _LibraryLogger(name))
