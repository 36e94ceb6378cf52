"""Every benchmark in bench/ runs in its `--quick` form and prints, as its last line, a JSON
object holding every figure that docs/benchmarks.md documents for it, so that neither a
benchmark nor its documentation can rot unseen. Nothing here looks at the figures' values:
benchmarks never assert on time.

The documented keys are read from the doc: in the section of `bench/NAME.py` (its heading
names the script), every name in backticks in the first column of a table whose first header
cell is "Figure". The scripts are found in bench/ (every `*.py` not starting with `_`), so a
new benchmark is run here as soon as it exists, and fails here until it is documented.

The quick runs start at once, in parallel (several of them mostly wait: real-time lease
and quiet periods), from one module-scoped fixture; each benchmark then has its own test. The
OpenStack benchmarks' runs have a fixture and a test of their own: they run on the session's
OpenStack world (one per test process), so on the xdist worker of the tests that use it
(tests/helpers/sharing.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.sharing import bench_openstack, describe_world
from trio_ccm_testbed.openstack import OpenStackWorld, Ports

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
DOC = ROOT / "docs" / "benchmarks.md"
LIMIT_S = 600.0  # one quick run that takes longer than this has hung
_HEADING = re.compile(r"^## .*\(`bench/(\w+)\.py`\)", re.M)
_KEY = re.compile(r"`([a-z][a-z0-9_]*)`")


OWN_TESTS = {"chaos": "tests/e2e/test_chaos.py"}
"""Benchmarks whose quick runs have a test of their own that checks more (chaos: both modes,
no violation, the documented keys); running them here too would only cost time."""


def needs_openstack(script: str) -> bool:
    """The OpenStack benchmarks (`bench/openstack_*.py`) run on an OpenStack world."""
    return script.startswith("openstack_")


def scripts() -> list[str]:
    return sorted(
        p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.stem not in OWN_TESTS
    )


def documented_keys(doc: str) -> dict[str, set[str]]:
    """Script name -> the JSON keys its section's figure tables name in their first column."""
    keys: dict[str, set[str]] = {}
    headings = list(_HEADING.finditer(doc))
    for heading, after in zip(headings, [*headings[1:], None], strict=True):
        section = doc[heading.end() : after.start() if after else len(doc)]
        found = keys.setdefault(heading.group(1), set())
        in_figures = False
        for line in section.splitlines():
            if not line.startswith("|"):
                in_figures = False
                continue
            first = line.split("|")[1].strip()
            if first == "Figure":
                in_figures = True
            elif in_figures and not set(first) <= set("-: "):
                found.update(_KEY.findall(first))
    return keys


@dataclass
class QuickRun:
    script: str
    returncode: int
    wall_s: float
    stdout: str
    stderr: str

    def figures(self) -> dict[str, object]:
        lines = self.stdout.strip().splitlines()
        assert lines, f"bench/{self.script}.py --quick printed nothing; stderr:\n{self.stderr}"
        figures = json.loads(lines[-1])
        assert isinstance(figures, dict)
        return figures


def start_quick_runs(names: list[str], env: dict[str, str]) -> Iterator[dict[str, QuickRun]]:
    """Start these benchmarks' quick runs at once, wait for all of them, yield their runs."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as files:
        running = {}
        for script in names:
            out = files.enter_context(Path(tmp, f"{script}.out").open("w+"))
            err = files.enter_context(Path(tmp, f"{script}.err").open("w+"))
            process = subprocess.Popen(
                [sys.executable, str(BENCH / f"{script}.py"), "--quick"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
            running[script] = (process, out, err, time.monotonic())
        runs = {}
        try:
            for script, (process, out, err, started) in running.items():
                left_s = max(1.0, LIMIT_S - (time.monotonic() - started))
                try:
                    returncode = process.wait(timeout=left_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    returncode = process.wait()
                wall_s = time.monotonic() - started
                out.seek(0)
                err.seek(0)
                runs[script] = QuickRun(script, returncode, wall_s, out.read(), err.read())
        finally:
            for process, *_ in running.values():
                if process.poll() is None:
                    process.kill()
                    process.wait()
        yield runs


def quick_env() -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture(scope="module")
def quick_runs() -> Iterator[dict[str, QuickRun]]:
    """Start every benchmark's quick run that needs no OpenStack at once; wait for all."""
    yield from start_quick_runs([s for s in scripts() if not needs_openstack(s)], quick_env())


@pytest.fixture(scope="module")
def openstack_quick_runs(openstack: OpenStackWorld) -> Iterator[dict[str, QuickRun]]:
    """The OpenStack benchmarks' quick runs, at once, on the session's OpenStack world
    (described to them in `TRIO_CCM_OPENSTACK_WORLD`: bench/_openstack.py) rather than on a
    world each."""
    env = quick_env()
    with tempfile.TemporaryDirectory() as tmp:
        name, value = describe_world(openstack, Path(tmp, "world.json"))
        env[name] = value
        yield from start_quick_runs([s for s in scripts() if needs_openstack(s)], env)


def test_every_benchmark_has_a_documented_section() -> None:
    """Every script in bench/ has a section in docs/benchmarks.md naming at least one figure."""
    keys = documented_keys(DOC.read_text())
    assert {s: sorted(keys.get(s, ())) for s in scripts() if not keys.get(s)} == {}


def check_quick_run(run: QuickRun) -> None:
    """The run exited 0 and its last line is JSON holding every key the doc documents."""
    assert run.returncode == 0, f"bench/{run.script}.py --quick failed:\n{run.stderr[-4000:]}"
    documented = documented_keys(DOC.read_text()).get(run.script, set())
    assert sorted(documented - set(run.figures())) == []


@pytest.mark.parametrize(
    "script", [pytest.param(s, id=s) for s in scripts() if not needs_openstack(s)]
)
def test_quick_run_prints_every_documented_figure(
    script: str, quick_runs: dict[str, QuickRun]
) -> None:
    """`bench/SCRIPT.py --quick` exits 0 and its last line is JSON holding every key the doc
    documents for it."""
    check_quick_run(quick_runs[script])


@pytest.mark.parametrize("script", [pytest.param(s, id=s) for s in scripts() if needs_openstack(s)])
def test_openstack_quick_run_prints_every_documented_figure(
    script: str, openstack_quick_runs: dict[str, QuickRun]
) -> None:
    """`bench/openstack_*.py --quick`, on the session's OpenStack world, exits 0 and its last
    line is JSON holding every key the doc documents for it."""
    check_quick_run(openstack_quick_runs[script])


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            "## A (`bench/a.py`)\n\n| Figure | Value |\n|---|---|\n| `x_s` (quick) | 1 |\n"
            "| `y` / `z` | 2 |\n\n| other | `not_me` |\n|---|---|\n| `nor_me` | 3 |\n",
            {"a": {"x_s", "y", "z"}},
            id="figure-tables-only",
        ),
        pytest.param(
            "## A (`bench/a.py`)\n| Figure |\n|---|\n| `k` |\n## B (`bench/b.py`)\nprose `p`\n",
            {"a": {"k"}, "b": set()},
            id="sections-split-at-headings",
        ),
    ],
)
def test_documented_keys_reads_the_first_column_of_figure_tables(
    doc: str, expected: dict[str, set[str]]
) -> None:
    """The doc parser takes backticked names from the first column of "Figure" tables only,
    per script section."""
    assert documented_keys(doc) == expected


def test_an_attached_world_is_the_described_one(tmp_path: Path) -> None:
    """What the OpenStack benches attach to (bench/_openstack.py) has every field of the
    world that was described, the same backend endpoints and the same cloud.conf."""
    world = OpenStackWorld(tmp_path / "world", Ports.from_base(24000))
    world.auth_url = "http://127.0.0.1:24010/v3"
    world.ccm_auth = {
        "username": "ccm",
        "password": 'a "quoted" secret',
        "project_name": "k8s",
        "user_domain_name": "Default",
        "project_domain_name": "Default",
    }
    world.network_id, world.subnet_id, world.external_network_id = "net", "subnet", "ext"
    world.flavors = {"m1.tiny": "1"}
    world.clouds_yaml = tmp_path / "world" / "clouds.yaml"
    name, value = describe_world(world, tmp_path / "world.json")
    attached = bench_openstack().attach(json.loads(Path(value).read_text()))
    assert name == "TRIO_CCM_OPENSTACK_WORLD"
    fields = [f.name for f in dataclasses.fields(world) if f.name not in ("faults", "timings_s")]
    assert [getattr(attached, f) for f in fields] == [getattr(world, f) for f in fields]
    assert attached.layout.backend_url("identity") == world.layout.backend_url("identity")
    mine = world.write_cloud_conf(tmp_path / "mine.conf").read_text()
    assert attached.write_cloud_conf(tmp_path / "attached.conf").read_text() == mine
