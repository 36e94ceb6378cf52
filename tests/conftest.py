"""Suite-wide test set-up."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


def pytest_configure() -> None:
    """Plain structlog output for the suite: structlog's default development renderer
    formats each logged traceback with its local variables (slow, and it would print
    whatever a frame holds); tests that assert on logs use structlog.testing.capture_logs."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["level", "event"]),
        ],
        cache_logger_on_first_use=False,
    )


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """Whatever a test does to logging (`configure_logging`, `trio-ccm` run in-process,
    `structlog.reset_defaults()`), the next test starts from the suite's set-up: a root
    handler left at DEBUG, or structlog's default renderer with its local-variable
    tracebacks, made every later test that logs pay for it (the leadership schedules took
    20-40 s each after tests/unit instead of about a second)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {
        name: logger.level
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    config = structlog.get_config()
    yield
    for handler in list(root.handlers):
        # pytest's own capture handlers come and go with each test phase: left to pytest.
        if handler not in handlers and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)
    for name, logger in logging.Logger.manager.loggerDict.items():
        if isinstance(logger, logging.Logger):
            logger.setLevel(levels.get(name, logging.NOTSET))
    structlog.configure(**config)
    structlog.contextvars.clear_contextvars()
