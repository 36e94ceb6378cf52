"""configure_logging: one stream, one format, for structlog events and stdlib records alike."""

from __future__ import annotations

import datetime
import io
import json
import logging
from collections.abc import Callable, Iterator

import pytest
import structlog

from trio_ccm.errors import ConfigError
from trio_ccm.logs import configure_logging

QUIET = ("hypercorn", "httpx", "httpcore", "hpack", "h2", "h11")


class TtyStream(io.StringIO):
    """A StringIO that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def stream() -> Iterator[Callable[[], io.StringIO]]:
    """Make streams for configure_logging; afterwards undo its handlers, levels and config."""
    root = logging.getLogger()
    root_level = root.level
    quiet_levels = {name: logging.getLogger(name).level for name in QUIET}
    made: list[io.StringIO] = []

    def make(tty: bool = False) -> io.StringIO:
        made.append(TtyStream() if tty else io.StringIO())
        return made[-1]

    yield make
    for handler in list(root.handlers):
        if getattr(handler, "stream", None) in made:
            root.removeHandler(handler)
    root.setLevel(root_level)
    for name, level in quiet_levels.items():
        logging.getLogger(name).setLevel(level)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def _json_lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_carry_event_level_timestamp_and_context(
    stream: Callable[..., io.StringIO],
) -> None:
    """JSON mode writes one line per event with event, level, a UTC timestamp and context."""
    out = stream()
    configure_logging(verbosity=0, fmt="json", stream=out)
    with structlog.contextvars.bound_contextvars(controller="service-lb-controller"):
        structlog.get_logger("trio_ccm.test").info("lb.ensured", lb_name="a1")
    [line] = _json_lines(out)
    assert line["event"] == "lb.ensured"
    assert line["level"] == "info"
    assert line["lb_name"] == "a1"
    assert line["controller"] == "service-lb-controller"
    assert line["logger"] == "trio_ccm.test"
    timestamp = datetime.datetime.fromisoformat(str(line["timestamp"]))
    assert timestamp.utcoffset() == datetime.timedelta(0)


@pytest.mark.parametrize(
    ("verbosity", "levels"),
    [
        pytest.param(0, ["info", "warning", "error"], id="v0-info"),
        pytest.param(1, ["debug", "info", "warning", "error"], id="v1-debug"),
        pytest.param(4, ["debug", "info", "warning", "error"], id="v4-debug"),
    ],
)
def test_verbosity_sets_the_level(
    stream: Callable[..., io.StringIO], verbosity: int, levels: list[str]
) -> None:
    """-v=0 logs info and above; -v=1 or more adds debug."""
    out = stream()
    configure_logging(verbosity=verbosity, fmt="json", stream=out)
    log = structlog.get_logger("trio_ccm.test")
    log.debug("x.debugged")
    log.info("x.informed")
    log.warning("x.warned")
    log.error("x.failed")
    assert [line["level"] for line in _json_lines(out)] == levels


@pytest.mark.parametrize(
    ("verbosity", "logger", "level", "shown"),
    [
        pytest.param(0, "hypercorn.error", logging.WARNING, True, id="hypercorn-warning"),
        pytest.param(1, "hypercorn.error", logging.INFO, False, id="hypercorn-info-at-v1"),
        pytest.param(1, "httpx", logging.INFO, False, id="httpx-info-at-v1"),
        pytest.param(0, "some.library", logging.INFO, True, id="other-info"),
        pytest.param(0, "some.library", logging.DEBUG, False, id="other-debug-at-v0"),
        pytest.param(1, "some.library", logging.DEBUG, True, id="other-debug-at-v1"),
    ],
)
def test_stdlib_records_use_the_same_stream_and_format(
    stream: Callable[..., io.StringIO], verbosity: int, logger: str, level: int, shown: bool
) -> None:
    """stdlib records reach the stream as JSON; hypercorn and httpx stay at warning."""
    out = stream()
    configure_logging(verbosity=verbosity, fmt="json", stream=out)
    logging.getLogger(logger).log(level, "listening on %s", "[::]:10258")
    lines = _json_lines(out)
    if not shown:
        assert lines == []
        return
    [line] = lines
    assert line["event"] == "listening on [::]:10258"
    assert line["level"] == logging.getLevelName(level).lower()
    assert line["logger"] == logger
    assert "timestamp" in line


@pytest.mark.parametrize(
    ("fmt", "tty", "json_expected", "colors"),
    [
        pytest.param("", False, True, False, id="auto-off-tty-json"),
        pytest.param("", True, False, True, id="auto-on-tty-console"),
        pytest.param("json", True, True, False, id="json-on-tty"),
        pytest.param("text", False, False, False, id="text-off-tty-no-colors"),
    ],
)
def test_format_follows_the_flag_and_the_terminal(
    stream: Callable[..., io.StringIO], fmt: str, tty: bool, json_expected: bool, colors: bool
) -> None:
    """Empty --logging-format means JSON off a TTY, console on one; colours only on a TTY."""
    out = stream(tty)
    configure_logging(verbosity=0, fmt=fmt, stream=out)
    structlog.get_logger("trio_ccm.test").info("lease.acquired", holder="a")
    text = out.getvalue()
    assert text.count("\n") == 1
    if json_expected:
        assert json.loads(text)["event"] == "lease.acquired"
    else:
        assert "lease.acquired" in text
        assert not text.startswith("{")
    assert ("\x1b[" in text) is colors


def test_second_call_replaces_the_first(stream: Callable[..., io.StringIO]) -> None:
    """Configuring twice writes each line once, to the second stream at the second level."""
    first, second = stream(), stream()
    configure_logging(verbosity=0, fmt="json", stream=first)
    structlog.get_logger("trio_ccm.test").info("x.before")
    configure_logging(verbosity=1, fmt="json", stream=second)
    structlog.get_logger("trio_ccm.test").debug("x.after")
    logging.getLogger("some.library").info("stdlib.after")
    assert [line["event"] for line in _json_lines(first)] == ["x.before"]
    assert [line["event"] for line in _json_lines(second)] == ["x.after", "stdlib.after"]


def _check_length(token: str) -> None:
    """Fail the way a provider might, with a secret in a local variable."""
    if len(token) > 4:
        raise ValueError(f"bad length {len(token)}")


def test_exceptions_render_without_local_variables(stream: Callable[..., io.StringIO]) -> None:
    """A logged exception is a structured traceback in JSON, with no local variables."""
    out = stream()
    configure_logging(verbosity=0, fmt="json", stream=out)
    token = "s3cret-token"
    try:
        _check_length(token)
    except ValueError:
        structlog.get_logger("trio_ccm.test").exception("reconcile.failed")
    [line] = _json_lines(out)
    assert line["level"] == "error"
    assert isinstance(line["exception"], list)
    assert line["exception"][0]["exc_type"] == "ValueError"
    assert token not in out.getvalue()


def test_unknown_format_is_a_config_error(stream: Callable[..., io.StringIO]) -> None:
    """A format other than text, json or empty is refused with the flag named."""
    with pytest.raises(ConfigError, match="--logging-format=xml"):
        configure_logging(verbosity=0, fmt="xml", stream=stream())


class BrokenStream(io.StringIO):
    """A stream whose writes fail, as a closed pipe's would."""

    def write(self, text: str) -> int:
        raise OSError("broken pipe")


def test_a_failing_stream_never_raises_into_the_caller(
    stream: Callable[..., io.StringIO], capsys: pytest.CaptureFixture[str]
) -> None:
    """A structlog line that cannot be written is reported as logging does, not raised."""
    broken = BrokenStream()
    configure_logging(verbosity=0, fmt="json", stream=broken)
    try:
        structlog.get_logger("trio_ccm.test").info("x.lost")
        assert "--- Logging error ---" in capsys.readouterr().err
    finally:
        for handler in list(logging.getLogger().handlers):
            if getattr(handler, "stream", None) is broken:
                logging.getLogger().removeHandler(handler)


def test_an_unnamed_logger_is_named_after_its_callers_module(
    stream: Callable[..., io.StringIO],
) -> None:
    """`structlog.get_logger()` with no name logs under the calling module's name."""
    out = stream()
    configure_logging(verbosity=0, fmt="json", stream=out)
    structlog.get_logger().info("x.unnamed")
    [line] = _json_lines(out)
    assert line["logger"] == __name__
