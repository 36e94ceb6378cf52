"""`bench/chaos.py --quick` as people run it: a short seeded chaos run (testbed and replica
processes on the sim cloud or on moto, or in-process schedules) ends with no violation (no
write outside the Lease, nothing leaked, duplicated or missing) and prints, as its last
line, a JSON object holding every key docs/benchmarks.md documents for its mode."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import trio

ROOT = Path(__file__).resolve().parents[2]
DOC_ROW = re.compile(r"^\| `(?P<key>[a-z_]+)` \| (?P<modes>[a-z, -]+) \|", re.M)


def documented_keys(mode: str) -> set[str]:
    """The top-level keys the Chaos section's table lists for `mode`."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    section = text.split("## Chaos", 1)[1].split("\n## ", 1)[0]
    keys = {m["key"] for m in DOC_ROW.finditer(section) if mode in m["modes"].split(", ")}
    assert keys, "docs/benchmarks.md: the Chaos section has no table of JSON keys"
    return keys


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        pytest.param(["--quick"], "process", id="processes"),
        pytest.param(["--quick", "--cloud", "aws"], "process", id="processes-aws"),
        pytest.param(["--quick", "--in-process"], "in-process", id="in-process"),
        pytest.param(["--quick", "--slow-cloud"], "slow-cloud", id="slow-cloud"),
    ],
)
async def test_the_quick_chaos_run_finds_no_violation(argv: list[str], mode: str) -> None:
    """The quick run exits 0 after some kill points (slow cloud: some requests landed late),
    with 0 violations, and its JSON holds the documented keys."""
    with trio.fail_after(180):
        done = await trio.run_process(
            [sys.executable, str(ROOT / "bench" / "chaos.py"), *argv],
            cwd=ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    output = done.stdout.decode()
    assert done.returncode == 0, output + done.stderr.decode()[-4000:]
    figures = json.loads(output.strip().splitlines()[-1])
    assert figures["mode"] == mode
    assert figures["violations_total"] == 0, figures["violations"]
    if mode == "slow-cloud":
        assert figures["landed_late"] > 0
    else:
        assert figures["kill_points_total"] > 0
    if mode == "process":
        run = figures["runs"][0]
        assert figures["cloud"] == (argv[2] if len(argv) > 2 else "sim")
        assert run["cloud_writes"] > 0  # the referee had writes to judge
        assert run["lease_identities_unmapped"] == []
    assert documented_keys(mode) <= set(figures), documented_keys(mode) - set(figures)
