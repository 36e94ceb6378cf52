"""The test world in two processes (trio_ccm_testbed.split): the kubelets' process writes
through the emulator's HTTP door, its progress lines, the emulator's lag watch and its
collector tuning, at small sizes."""

from __future__ import annotations

import datetime as dt
import functools
import gc
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
import trio
import trio.testing

from trio_ccm.kube.errors import AlreadyExistsError, NotFoundError
from trio_ccm.kube.objects import NODES
from trio_ccm.kube.patches import STRATEGIC, JSONValue, Patch
from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver
from trio_ccm_testbed.cloud import SimCloud
from trio_ccm_testbed.split import (
    Http1Pool,
    LagWatch,
    TimedApiServer,
    kubelets_client,
    register_nodes,
    tune_collector,
    watch_progress,
)
from trio_ccm_testbed.testbed import Testbed, launch_instances, node_manifest

EPOCH = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)  # the kubelets' virtual wall clock
LIMIT_S = 90.0  # processes start slowly on a loaded machine; a run past this has hung


@pytest.mark.parametrize(
    ("held_s", "recorded"),
    [
        pytest.param(0.5, False, id="half-a-second-not-a-stall"),
        pytest.param(1.6, True, id="a-step-of-1.6s-is-a-lag-of-1.5s"),
        pytest.param(5.1, True, id="a-collection-of-5s"),
    ],
)
async def test_lag_watch_records_a_loop_held_past_its_threshold(
    autojump_clock: trio.testing.MockClock, held_s: float, recorded: bool
) -> None:
    """A step that holds the loop for `held_s` makes the watch wake that much late (less its
    0.1 s period); only lags of 1 s or more are recorded, and the longest is kept."""
    watch = LagWatch(threshold_s=1.0, period_s=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run)
        await trio.sleep(0.05)  # mid-period: the watch is due at 0.1
        autojump_clock.jump(held_s)  # the loop is held: no task runs meanwhile
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert watch.max_s == pytest.approx(held_s - 0.05)
    assert watch.lags == ([pytest.approx(held_s - 0.05)] if recorded else [])


@pytest.mark.parametrize(
    ("delay_s", "logged"),
    [
        pytest.param(0.0, False, id="a-quick-list-is-not-logged"),
        pytest.param(0.5, True, id="a-list-of-half-a-second-is-named"),
    ],
)
async def test_a_slow_request_is_logged_with_what_it_asked(
    autojump_clock: trio.testing.MockClock, delay_s: float, logged: bool
) -> None:
    """A request the emulator took `slow_s` (0.2 s) or more to answer is logged as
    `testbed.slow-request` with its verb, path, query and agent, so a lag can be named."""
    api = TimedApiServer(seed=1)
    if delay_s:
        api.faults.inject_latency(delay_s, verb="list", resource="nodes")
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as client:
        with structlog.testing.capture_logs() as logs:
            response = await client.get(
                "/api/v1/nodes", params={"labelSelector": "!a", "limit": "1"}
            )
    assert response.status_code == 200
    slow = [entry for entry in logs if entry["event"] == "testbed.slow-request"]
    if not logged:
        assert slow == []
        return
    assert len(slow) == 1
    assert (slow[0]["method"], slow[0]["path"], slow[0]["status"]) == ("GET", "/api/v1/nodes", 200)
    assert slow[0]["query"] == "labelSelector=!a&limit=1"
    assert slow[0]["seconds"] == pytest.approx(delay_s)


async def test_the_cpu_clock_is_read_at_most_once_per_mark_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The emulator reads its thread's CPU clock (a system call) for the first request of
    each `CPU_MARK_S`, not for every request; a slow request's CPU counts from that mark."""
    api = TimedApiServer(seed=1)
    marks = []
    async with httpx.AsyncClient(transport=api.transport(), base_url="http://emulator") as client:
        for pause_s in (0.0, 0.0, api.CPU_MARK_S / 2, api.CPU_MARK_S):
            await trio.sleep(pause_s)
            assert (await client.get("/api/v1/nodes")).status_code == 200
            marks.append(api._mark[0])
    start = marks[0]
    assert marks == [start, start, start, pytest.approx(start + 1.5 * api.CPU_MARK_S)]


@pytest.mark.parametrize(
    ("counts", "lines"),
    [
        pytest.param(
            [0, 3, 9, 10, 11, 19, 25],
            ["registered 10 of 25", "registered 25 of 25"],
            id="every-ten-then-the-total",
        ),
        pytest.param([25], ["registered 25 of 25"], id="all-at-once"),
        pytest.param(
            [12, 24, 25],
            ["registered 12 of 25", "registered 24 of 25", "registered 25 of 25"],
            id="each-crossing-once",
        ),
    ],
)
async def test_world_builder_says_each_ten_thousand_then_the_total(
    autojump_clock: trio.testing.MockClock, counts: list[int], lines: list[str]
) -> None:
    """The builder's progress says a line each time `every` more Nodes are registered (here
    10), then one at the total, with the elapsed time and the process's RSS."""
    said: list[str] = []
    polled = iter(counts)
    with trio.fail_after(60):
        await watch_progress(lambda: next(polled), 25, every=10, say=said.append)
    assert [line.split(" Nodes")[0] for line in said] == lines
    assert all("after" in line and "MB" in line for line in said)


@pytest.mark.parametrize(
    "initialised", [pytest.param(True, id="initialised"), pytest.param(False, id="new-and-tainted")]
)
async def test_world_builder_registers_nodes_the_kubelets_then_only_heartbeat(
    autojump_clock: trio.testing.MockClock, initialised: bool
) -> None:
    """The builder registers each Node as its kubelet would (the kubelet's manifest, managed
    fields under "kubelet"), saying its progress; kubelets of a replica cloud (same seed)
    adopt those Nodes without a write, and their first heartbeat writes each one again."""
    api = ApiServer(seed=1)
    said: list[str] = []
    await register_nodes(
        api, SimCloud(seed=1), 25, initialised=initialised, every=10, say=said.append
    )
    assert [line.split(" Nodes")[0] for line in said] == [
        "registered 10 of 25",
        "registered 20 of 25",
        "registered 25 of 25",
    ]
    built = {f"node-{i:04d}": api.get("v1", "Node", f"node-{i:04d}") for i in range(1, 26)}
    first = built["node-0001"]
    assert [m["manager"] for m in first["metadata"]["managedFields"]] == ["kubelet"]
    assert bool(first["spec"].get("providerID")) is initialised
    assert bool(first["spec"].get("taints")) is not initialised
    versions = {name: node["metadata"]["resourceVersion"] for name, node in built.items()}
    testbed = Testbed(
        api,
        SimCloud(seed=1),
        heartbeat_s=10.0,
        node_lease_s=None,
        now=lambda: EPOCH + dt.timedelta(seconds=trio.current_time()),  # beats change it
    )
    testbed.add_nodes(25, initialised=initialised, registered=True)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(testbed.serve)
            adopted = {
                name: api.get("v1", "Node", name)["metadata"]["resourceVersion"] for name in built
            }
            await trio.sleep(10.5)  # every first beat is in (0, 10] s
            nursery.cancel_scope.cancel()
    assert adopted == versions  # no write to adopt them
    assert testbed.statistics().registrations == 25
    assert testbed.statistics().heartbeats >= 25  # (a beat due near 0 s beats twice)
    for name in built:
        assert api.get("v1", "Node", name)["metadata"]["resourceVersion"] != versions[name]


def test_tuned_collector_never_walks_the_old_generation() -> None:
    """Tuned, the collector still collects the young generations as objects come, but never
    the oldest, however many objects it holds (the stored world is never walked)."""
    previous = tune_collector()
    try:
        before = [s["collections"] for s in gc.get_stats()]
        kept = [[i] for i in range(2_000_000)]  # long-lived containers, as a stored world
        after = [s["collections"] for s in gc.get_stats()]
        assert after[0] > before[0]
        assert after[1] > before[1]
        assert after[2] == before[2]
        del kept
    finally:
        gc.set_threshold(*previous)


@pytest.mark.parametrize(
    "server",
    [
        pytest.param("http://203.0.113.5:8080", id="documentation-range"),
        pytest.param("http://example.com:8080", id="a-name"),
        pytest.param("https://127.0.0.1:6443", id="tls-is-not-the-split-emulator"),
    ],
)
def test_kubelets_refuse_an_emulator_off_loopback(server: str) -> None:
    """The kubelets' client is built only for a plain-HTTP emulator on loopback; anything
    else is refused, naming the flag and the fix, before any request is sent."""
    with pytest.raises(ValueError, match=r"--server .*loopback"):
        kubelets_client(server)


async def test_status_writer_patches_as_the_kube_client_would_and_maps_refusals() -> None:
    """The kubelets' lean status writer, over the emulator's HTTP door, writes the status
    patch under the kube client's field manager (the one a heartbeat through the client
    gets), and a gone Node is a NotFoundError naming it."""
    api = ApiServer(seed=1)
    cloud = SimCloud(seed=1)
    await register_nodes(api, cloud, 2, initialised=True, every=10, say=lambda _: None)
    stamp = "2030-01-01T00:00:05Z"
    patch: dict[str, JSONValue] = {
        "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": stamp}]}
    }
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            listening = await nursery.start(serve_apiserver, api)
            client, writer = kubelets_client(listening.url)
            await writer.patch_status("node-0001", json.dumps(patch).encode())
            await client.patch(NODES, "node-0002", Patch(STRATEGIC, patch), subresource="status")
            with pytest.raises(NotFoundError, match="node-0009"):
                await writer.patch_status("node-0009", json.dumps(patch).encode())
            await client.aclose()
            nursery.cancel_scope.cancel()
    managers = []
    for name in ("node-0001", "node-0002"):
        node = api.get("v1", "Node", name)
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["lastHeartbeatTime"]) == ("True", stamp)
        managers.append(sorted(m["manager"] for m in node["metadata"]["managedFields"]))
    assert managers[0] == managers[1] == ["kubelet", "trio-ccm"]


async def test_status_writer_registers_as_the_kube_client_would_and_maps_a_conflict() -> None:
    """A registration through the kubelets' lean writer creates the Node as one through the
    kube client does (same object, same field manager), and a second one is an
    AlreadyExistsError naming the Node."""
    api = ApiServer(seed=1)
    cloud = SimCloud(seed=1)
    lean, plain = launch_instances(cloud, 2)
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            listening = await nursery.start(serve_apiserver, api)
            client, writer = kubelets_client(listening.url)
            await writer.register_node(json.dumps(node_manifest(lean, now=now)).encode())
            await client.create(NODES, node_manifest(plain, now=now))
            with pytest.raises(AlreadyExistsError, match=lean.name):
                await writer.register_node(json.dumps(node_manifest(lean, now=now)).encode())
            await client.aclose()
            nursery.cancel_scope.cancel()
    nodes = [api.get("v1", "Node", instance.name) for instance in (lean, plain)]
    kept = [
        (
            {k: v for k, v in n["metadata"]["labels"].items() if k != "kubernetes.io/hostname"},
            n["spec"],
            [m["manager"] for m in n["metadata"]["managedFields"]],
        )
        for n in nodes
    ]
    assert kept[0] == kept[1]


async def _scripted_server(
    nursery: trio.Nursery, answers: list[list[bytes]]
) -> tuple[int, list[int]]:
    """A loopback server: its n-th connection sends `answers[n]`, one item per request read
    (an item ending the connection after it is sent when it is not a whole answer), then
    closes. Returns the port and the requests read per connection."""
    read: list[int] = []

    async def handle(stream: trio.SocketStream) -> None:
        index = len(read)
        read.append(0)
        script = answers[index] if index < len(answers) else []
        buffer = b""
        async with stream:
            for item in script:
                while b"\r\n\r\n" not in buffer:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(buffer) < length:
                    buffer += await stream.receive_some(65536)
                buffer = buffer[length:]
                read[index] += 1
                await stream.send_all(item)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1], read


OK_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"


@pytest.mark.parametrize(
    ("answers", "outcome", "reads"),
    [
        pytest.param(
            [[OK_ANSWER], [OK_ANSWER]], 200, [1, 1], id="idle-connection-closed-sent-again"
        ),
        pytest.param(
            [[OK_ANSWER], []], "before answering", [1, 0], id="a-new-connection-closed-raises"
        ),
        pytest.param(
            [[OK_ANSWER, b"HTTP/1.1 200 OK\r\ncontent-le"]],
            "mid-answer",
            [2],
            id="closed-mid-answer-not-sent-again",
        ),
    ],
)
async def test_a_kept_connection_the_server_closed_is_replaced_once(
    answers: list[list[bytes]], outcome: int | str, reads: list[int]
) -> None:
    """The kubelets' lean pool sends a request again on a new connection when the kept one
    was closed by the server before any byte of the answer (its keep-alive timeout: it read
    nothing); a new connection closed, or an answer cut short, is raised, not retried."""
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            port, read = await _scripted_server(nursery, answers)
            pool = Http1Pool("127.0.0.1", port, size=1)
            first = await pool.exchange("PATCH", "/a", [], b"{}")
            assert first[0] == 200
            if isinstance(outcome, int):
                assert (await pool.exchange("PATCH", "/b", [], b"{}"))[0] == outcome
            else:
                with pytest.raises(httpx.RemoteProtocolError, match=outcome):
                    await pool.exchange("PATCH", "/b", [], b"{}")
            await pool.aclose()
            nursery.cancel_scope.cancel()
    assert read == reads


def _spawn(args: list[str], err: Path) -> subprocess.Popen[str]:
    with err.open("w") as log:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "trio_ccm_testbed.split", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            text=True,
        )


def _stop(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    if child.stdout is not None:
        child.stdout.close()


async def _readline(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line: str = await trio.to_thread.run_sync(child.stdout.readline)
    if not line:
        raise AssertionError(f"the worker exited ({child.poll()})")
    return line.rstrip()


async def test_kubelets_in_a_worker_process_update_nodes_through_the_emulator(
    tmp_path: Path,
) -> None:
    """The kubelets' process registers its Nodes in an emulator served over loopback HTTP
    by this process, says its progress, then heartbeats them: each Node's status is written
    again (a newer resourceVersion, Ready=True) through the HTTP door."""
    api = ApiServer(seed=1)
    with trio.fail_after(LIMIT_S):
        async with trio.open_nursery() as nursery:
            listening = await nursery.start(serve_apiserver, api)
            child = _spawn(
                [
                    "kubelets",
                    f"--server={listening.url}",
                    "--nodes=5",
                    "--heartbeat=1s",
                    "--no-node-leases",
                    "--progress-every=2",
                    f"--cloud-config-out={tmp_path / 'cloud.yaml'}",
                ],
                tmp_path / "kubelets.log",
            )
            try:
                lines = [await _readline(child)]
                while "nodes registered" not in lines[-1]:
                    lines.append(await _readline(child))
                registered = {
                    n: int(api.get("v1", "Node", n)["metadata"]["resourceVersion"])
                    for n in (f"node-{i:04d}" for i in range(1, 6))
                }
                while True:  # every Node heartbeated at least once (period 1 s)
                    now = {
                        n: int(api.get("v1", "Node", n)["metadata"]["resourceVersion"])
                        for n in registered
                    }
                    if all(now[n] > registered[n] for n in registered):
                        break
                    await trio.sleep(0.2)
            finally:
                await trio.to_thread.run_sync(_stop, child)
            nursery.cancel_scope.cancel()
    assert lines[0].startswith("sim cloud listening on http://127.0.0.1:")
    assert (tmp_path / "cloud.yaml").read_text().startswith("url: http://127.0.0.1:")
    assert any(line.startswith("registered 5 of 5 Nodes after") for line in lines)
    node = api.get("v1", "Node", "node-0001")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert "node.cloudprovider.kubernetes.io/uninitialized" in json.dumps(node["spec"])


async def test_emulator_process_serves_and_reports_its_longest_lag(tmp_path: Path) -> None:
    """The emulator's process serves the API on loopback (the kubeconfig it writes points
    there) and, stopped, logs its lag watch's summary: the longest lag and how many were
    of 1 s or more."""
    child = _spawn(
        ["emulator", f"--kubeconfig-out={tmp_path / 'kubeconfig'}"], tmp_path / "emulator.log"
    )
    try:
        with trio.fail_after(LIMIT_S):
            first = await _readline(child)
        url = first.removeprefix("apiserver listening on ")
        async with httpx.AsyncClient(base_url=url) as client:
            response = await client.get("/api/v1/nodes")
        assert response.status_code == 200
        assert response.json()["items"] == []
        assert url in (tmp_path / "kubeconfig").read_text()
    finally:
        await trio.to_thread.run_sync(_stop, child)
    records: list[dict[str, Any]] = [
        json.loads(line) for line in (tmp_path / "emulator.log").read_text().splitlines()
    ]
    summary = [r for r in records if r["event"] == "testbed.lag-summary"]
    assert len(summary) == 1
    assert summary[0]["threshold_s"] == 1.0
    assert summary[0]["max_seconds"] >= 0.0
    assert summary[0]["lags"] == sum(1 for r in records if r["event"] == "testbed.lag")
