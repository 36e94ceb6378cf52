"""Suite-wide test set-up."""

from __future__ import annotations

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
