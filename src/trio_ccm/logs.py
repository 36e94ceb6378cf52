"""The one logging configuration of trio-ccm, applied by the cli and nowhere else.

structlog events and stdlib `logging` records (hypercorn, httpx) go through the same
processors to one stream: JSON lines off a TTY (or with `--logging-format=json`), colourless
or coloured console lines otherwise. Every line carries `event`, `level` and an ISO-8601 UTC
`timestamp`, plus whatever `structlog.contextvars` holds. Library code only calls
`structlog.get_logger()`; embedding programs configure logging themselves.
"""

from __future__ import annotations

import logging
from typing import Final, TextIO

import structlog
from structlog.typing import Processor

from trio_ccm.errors import ConfigError

__all__ = ["configure_logging"]

# Third-party loggers whose info/debug chatter is not ours to show, even at -v=1.
_QUIET_LOGGERS: Final = ("hypercorn", "httpx", "httpcore", "hpack", "h2", "h11")


class _StreamHandler(logging.StreamHandler[TextIO]):
    """The root handler configure_logging installs; its class finds it again on a second call."""


def configure_logging(*, verbosity: int, fmt: str, stream: TextIO) -> None:
    """Send structlog and stdlib logging to `stream` at info (`verbosity` 0) or debug (>= 1).

    `fmt` is "json", "text", or "" for json unless `stream` is a TTY. Calling it again
    replaces the previous configuration.
    """
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

    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        context_class=dict,
        # Off so that a second call (and structlog.testing.capture_logs) takes effect on
        # module-level loggers already used.
        cache_logger_on_first_use=False,
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
