"""Suite-wide test set-up."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from tests.helpers.sharing import SharingScheduling, check_openstack_group
from trio_ccm_testbed.openstack import OpenStackWorld, Unavailable, open_free_world
from trio_ccm_testbed.openstack.processes import group_members


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the OpenStack world are all in its xdist group (tests/helpers/sharing.py)."""
    check_openstack_group(items)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`: whole test modules per worker, and every test that uses the
    OpenStack world on one worker (tests/helpers/sharing.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return SharingScheduling(config, log)


@pytest.fixture(scope="session")
def openstack() -> Iterator[OpenStackWorld]:
    """The session's OpenStack (trio_ccm_testbed.openstack; docs/openstack-testworld.md):
    tests/openstack and the OpenStack benches' quick runs (tests/bench) share it.

    Where the world cannot run (not Debian 12, not root, packages missing and no apt), every
    test that uses it is skipped with the reason and what to install; under `CI=true` that is
    a failure instead."""
    try:
        world = open_free_world()
    except Unavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the OpenStack test world cannot run: {exc}")
        pytest.skip(f"OpenStack test world unavailable: {exc}")
    groups = world.processes()
    try:
        yield world
    finally:
        world.stop()
    left = {name: group_members(pid) for name, pid in groups.items() if group_members(pid)}
    if left:
        pytest.fail(f"the OpenStack world's stop left processes running: {left}")


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
