"""Scale: the CCM as its own process, exactly as deployed, against a large simulated cluster.

    python bench/scale.py [--nodes N ...] [--quick] [--plot FILE]

For each N (default 1,000, 5,000, 20,000 and 100,000), in a fresh world:

1. **The cluster**, in two processes (`trio_ccm_testbed.split`), so that the emulator
   serving the CCM is not also the world's builder and 100,000 kubelets: `split emulator`
   serves the Kubernetes API alone on loopback (its collector tuned for a large stored
   world, a lag watch logging every stall of its loop of 1 s or more), and `split kubelets`
   runs the simulated cloud on loopback with N running instances whose kubelets register
   their Nodes through the emulator's HTTP door, already initialised, as in a running
   cluster (`--initialised`: provider ID, topology labels, IPs, no taint), then post their
   status every `--heartbeat` (5 min, the kubelet's `--node-status-report-frequency`,
   counted from when the world is built; `--no-node-leases`: the kubelets' Lease writes do
   not reach a CCM). A progress line every 10,000 Nodes registered gives the count, the
   time and both processes' RSS. The load-balancer pool is `--lb-network 10.128.0.0/9`.
   The bench then creates 5,000 Services over HTTP, 250 of them `type: LoadBalancer` (the
   issue's mix).
2. **The CCM**, `trio-ccm` with the deployment's flags (deploy/deployment.yaml:
   `--cloud-provider=sim --leader-elect=true --configure-cloud-routes=false`, TLS on the
   secure port), out of cluster (`--kubeconfig`), `--kube-api-qps=200 --kube-api-burst=400`
   (the join's bound below), `--cloud-batch-size=1000` (as bench/aws.py: an address sync
   asks about 1,000 Nodes per call; the default, 200, makes it N/200 calls) and
   `--node-status-update-frequency` shortened to the steady window (60 s) so that the window
   holds exactly one address-sync period. Measured:
   - `ready_s`: from spawning the process until `/readyz` answers 200 (caches synced, Lease
     held, controllers running);
   - `peak_rss_mb`: the process's peak RSS (VmHWM) when the run ends;
   - `settle_s`: start-up's work done: the first address sync, and the 250 load balancers
     ensured (`PutLoadBalancer` each, as the Go CCM also ensures every load balancer when it
     starts; the same calls whether they existed or not), until no load-balancer call for 5 s;
   - then, over a steady window of
     one sync period, with kubelet heartbeats arriving: `steady_cpu_pct` (user + system CPU
     of the CCM process / wall time, 100 = one core), `settled_rss_mb` (VmRSS at the end) and
     `cloud_calls_per_period` (every call in the simulated cloud's log in the window);
   - `join_1000_s`: 1,000 instances are added through the simulated cloud's admin API (one
     batch call, `join_posted_s` until it answered); their kubelets
     register new (tainted) Nodes (`join_registered_s` until the last has); the time from
     the first instance until no Node lacks the instance-type label and all N + 1,000 are
     there. Bound by the kube client:
     2 writes per Node at 200/s with a burst of 400, (2,000 - 400)/200 = 8 s
     (`join_qps_bound_s`); `join_cpu_pct`: each process's CPU over the join (the emulator,
     the kubelets and cloud, the CCM; % of a core), which says what bound it;
     `join_writes`: the CCM's PATCH and PUT requests over the join from its client metrics,
     their mean round trip and mean wait for a QPS token (ms): each Node holds one of the
     `--concurrent-node-syncs` slots for its two writes, so the slots bound the join at
     slots / (2 x round trip) Nodes a second;
   - `nodeset_push_s`: from the same start until the last `SetLoadBalancerBackends`, once
     every load balancer has had one and the load-balancer calls have been quiet for 5 s;
     every load balancer is then checked to hold the N + 1,000 Nodes (three of them above
     20,000 Nodes, as each answer lists every Node). Bound by the cloud budget for load
     balancers (default 5 calls/s, burst 10): (250 - 10)/5 = 48 s per pass.
3. Growth: `bytes_per_node` and `cpu_pct_per_1000_nodes` between the smallest and the largest
   N, and against the Go CCM's algorithm at the same N: one `InstanceMetadata` per Node per
   sync period (`go_calls_per_period` = N), one per joining Node (`go_join_calls`), and one
   `UpdateLoadBalancer` per load balancer, one at a time (`--concurrent-service-syncs=1`), per
   node-set pass.

The CCM's memory can be broken down with `TRIO_CCM_TRACEMALLOC=DIR` (docs/benchmarks.md): the
bench passes it through with `--tracemalloc DIR`.

Prints a table, then one JSON object as the last line: the figures of the largest N and,
under `runs`, every N's. Benchmarks print numbers; they never assert on time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from _common import cpu_seconds, machine_line, print_figures, rss_bytes

ROOT: Final = Path(__file__).resolve().parents[1]
TRIO_CCM: Final = str(Path(sys.executable).with_name("trio-ccm"))
LB_NETWORK: Final = "10.128.0.0/9"
HEARTBEAT: Final = "300s"
QPS: Final = (200, 400)
BATCH: Final = 1000  # --cloud-batch-size: an address sync asks 1,000 Nodes per call
DEFAULT_NODES: Final = (1000, 5000, 20_000, 100_000)
LB_RATE: Final = (5.0, 10)  # the cloud budget's default for load balancers (cloud/budget.py)
JOIN_WRITES_PER_NODE: Final = 2  # the status patch, then the Node patch (cloud_node.py)
WAVE_CLIENT_BUDGET_S: Final = 300.0  # a wave's kube writes take at most this at its QPS
NODE_SYNCS: Final = 10  # --concurrent-node-syncs as deployed (upstream's default)
WAVE_WRITE_RTT_S: Final = 0.05  # a kube write's round trip a raised QPS is sized for
PROGRESS_EVERY: Final = 10_000  # a progress line each time this many more Nodes registered
TAINTLESS_LABEL: Final = "node.kubernetes.io/instance-type"
LB_LABEL: Final = "bench.trio-ccm.dev/load-balancer"  # lets the bench list only those
GOALS: Final = {  # issue 18, at 100,000 Nodes (and at 5,000 for RSS and CPU)
    "rss_mb_100k": 300,
    "ready_s": 60,
    "cloud_calls_per_period": 100,
    "cpu_pct_100k": 10,
    "rss_mb_5k": 120,
    "cpu_pct_5k": 5,
}


@dataclass
class Sizes:
    nodes: int
    services: int
    lb_services: int
    join: int
    window_s: float
    settle_quiet_s: float
    wave: bool = False
    settle_extra_s: float = 0.0  # wave: how long the CCM settles before the steady window
    wave_limit_s: float = 3600.0  # wave: cut (and say so) if not done by then


@dataclass
class Run:
    """The figures of one N."""

    nodes: int
    services: int
    lb_services: int
    mode: str = "initialised"  # or "wave": every Node registers new and tainted
    testbed_start_s: float = 0.0
    wave_nodes_s: float = 0.0
    wave_cut_nodes: int = 0  # a wave cut at its limit: Nodes initialised by then (else 0)
    wave_cut_s: float = 0.0
    wave_lbs_s: float = 0.0
    wave_cloud_calls: dict[str, int] = field(default_factory=dict)
    wave_peak_rss_mb: float = 0.0
    ipam: bool = False
    kube_qps: int = QPS[0]  # the CCM's --kube-api-qps and --kube-api-burst in this run
    kube_burst: int = QPS[1]
    node_syncs: int = NODE_SYNCS  # the CCM's --concurrent-node-syncs in this run
    ready_s: float = 0.0
    startup_cloud_calls: dict[str, int] = field(default_factory=dict)
    settle_s: float = 0.0
    lbs_with_ingress: int = 0
    peak_rss_mb: float = 0.0
    settled_rss_mb: float = 0.0
    steady_cpu_pct: float = 0.0
    window_s: float = 0.0
    cloud_calls_per_period: int = 0
    period_calls: dict[str, int] = field(default_factory=dict)
    join: int = 0
    join_1000_s: float = 0.0
    join_registered_s: float = 0.0  # until the kubelets registered the last joining Node
    join_posted_s: float = 0.0  # until the simulated cloud had launched the last instance
    join_qps_bound_s: float = 0.0
    join_cloud_calls: int = 0
    join_cpu_pct: dict[str, float] = field(default_factory=dict)  # per process, over the join
    join_writes: dict[str, float] = field(default_factory=dict)  # the CCM's, over the join
    nodeset_push_s: float = 0.0
    nodeset_backend_calls: int = 0
    nodeset_lb_budget_bound_s: float = 0.0
    nodeset_checked: dict[int, int] = field(default_factory=dict)  # Nodes held -> LBs
    testbed_rss_mb: float = 0.0
    go_calls_per_period: int = 0
    go_join_calls: int = 0
    go_nodeset_calls: int = 0
    lease_losses: int = 0
    ccm_stalls: int = 0
    ccm_max_stall_s: float = 0.0
    testbed_max_stall_s: float = 0.0  # the emulator's longest loop lag (its lag watch)
    testbed_lags: int = 0  # the emulator's lags of 1 s or more
    emulator_rss_mb: float = 0.0
    kubelets_rss_mb: float = 0.0
    kubelets_max_stall_s: float = 0.0  # the kubelets' process: its longest step
    slowest_requests: list[str] = field(default_factory=list)  # the emulator's, >= 0.2 s


def stalls_and_losses(log: Path) -> tuple[list[float], int]:
    """The `trio.stall` lines' seconds and the count of `lease.lost` lines in a JSON log."""
    stalls: list[float] = []
    losses = 0
    with log.open() as lines:
        for line in lines:
            if '"trio.stall"' in line or '"lease.lost"' in line:
                record = json.loads(line)
                if record["event"] == "trio.stall":
                    stalls.append(float(record["seconds"]))
                else:
                    losses += 1
    return stalls, losses


def emulator_lags(log: Path) -> tuple[int, list[float], float]:
    """From the emulator's JSON log: its lags of 1 s or more (`testbed.lag`), its steps of
    1 s or more (`trio.stall`), and the longest lag its watch saw (`testbed.lag-summary`,
    logged when it stops; else the longest `testbed.lag`)."""
    lags: list[float] = []
    steps: list[float] = []
    longest = 0.0
    watching = False  # the world's build (before the watch) serves no one: not counted
    with log.open() as lines:
        for line in lines:
            if '"testbed.lag' not in line and '"trio.stall"' not in line:
                continue
            record = json.loads(line)
            watching = watching or record["event"] == "testbed.lag-watch"
            if not watching:
                continue
            if record["event"] == "testbed.lag":
                lags.append(float(record["seconds"]))
            elif record["event"] == "testbed.lag-summary":
                longest = float(record["max_seconds"])
            elif record["event"] == "trio.stall":
                steps.append(float(record["seconds"]))
    return len(lags), steps, max(longest, *lags, 0.0)


def slow_requests(log: Path, top: int = 5) -> list[str]:
    """From the emulator's JSON log: its `top` slowest requests once serving
    (`testbed.slow-request`), each as "seconds (cpu) METHOD path?query agent"."""
    found: list[tuple[float, str]] = []
    watching = False  # the world's build (before the lag watch) serves no one: not counted
    with log.open() as lines:
        for line in lines:
            watching = watching or '"testbed.lag-watch"' in line
            if watching and '"testbed.slow-request"' in line:
                r = json.loads(line)
                found.append(
                    (
                        float(r["seconds"]),
                        f"{r['seconds']:.2f} s ({r['cpu_seconds']:.2f} CPU) {r['method']} "
                        f"{r['path']}?{r['query']} [{r['agent'].split(' ')[0]}]",
                    )
                )
    return [text for _, text in sorted(found, reverse=True)[:top]]


# -- processes --------------------------------------------------------------------------------
@contextlib.contextmanager
def process(args: list[str], log: Path, *, env: dict[str, str] | None = None) -> Iterator[Any]:
    """A child process, stopped with SIGINT (then SIGKILL after 30 s) when the block ends."""
    with log.open("w") as err:
        child = subprocess.Popen(  # noqa: S603 - our own trio-ccm, by its path
            args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True, env=env
        )
        try:
            yield child
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGINT)
                try:
                    child.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()


def read_until(child: Any, pattern: str, timeout_s: float, on_line: Any = None) -> re.Match[str]:
    """Read a child's stdout until a line matches `pattern`; that match. `on_line` sees
    every line before it (progress)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError(f"{child.args[:4]} exited ({child.poll()}) before {pattern!r}")
        if match := re.search(pattern, line):
            return match
        if on_line is not None:
            on_line(line.rstrip())
    raise RuntimeError(f"no {pattern!r} from {child.args[:4]} within {timeout_s:.0f} s")


CLUSTER_CIDR: Final = "10.0.0.0/10"  # beside the load-balancer pool, not in it
NODE_CIDR_MASK: Final = 26  # 65,536 pod CIDRs, the most one cluster CIDR may hold (upstream's
IPAM_MAX_NODES: Final = 2**16  # limit too): above, a wave runs with IPAM off, and says so


def wave_qps(nodes: int, *, ipam: bool) -> tuple[int, int]:
    """The CCM's kube QPS and burst for a wave of `nodes`: 200/400 (the deployment's) while
    its writes fit in `WAVE_CLIENT_BUDGET_S` at 200/s (2 per Node, 3 with IPAM: the pod
    CIDRs), else raised so they do (in steps of 50, burst twice the QPS): a 100,000-Node
    wave is 200,000 writes, 1,000 s at 200/s before anything else."""
    writes = nodes * (JOIN_WRITES_PER_NODE + (1 if ipam else 0))
    qps = max(QPS[0], 50 * math.ceil(writes / WAVE_CLIENT_BUDGET_S / 50))
    return (qps, 2 * qps) if qps > QPS[0] else QPS


def wave_node_syncs(qps: int) -> int:
    """The CCM's --concurrent-node-syncs for a wave at `qps`: as deployed (10) at the
    deployed QPS, else raised with it (in steps of 5) so that the Node writes in flight can
    use the raised QPS at a round trip of `WAVE_WRITE_RTT_S`: each of them holds its slot
    for two writes, so 10 slots make at most 10 / (2 x round trip) Nodes a second (100 at
    50 ms), below the 120 a second a 100,000-Node wave needs to fit in 15 minutes."""
    if qps <= QPS[0]:
        return NODE_SYNCS
    return max(NODE_SYNCS, 5 * math.ceil(qps * WAVE_WRITE_RTT_S / 5))


def ccm_args(
    tmp: Path,
    port: int,
    period_s: float,
    *,
    ipam: bool = False,
    qps: tuple[int, int] = QPS,
    node_syncs: int = NODE_SYNCS,
) -> list[str]:
    ipam_flags = (
        [
            "--allocate-node-cidrs",
            f"--cluster-cidr={CLUSTER_CIDR}",
            f"--node-cidr-mask-size={NODE_CIDR_MASK}",
        ]
        if ipam
        else []
    )
    return [
        TRIO_CCM,
        *ipam_flags,
        "--cloud-provider=sim",
        f"--cloud-config={tmp / 'cloud.yaml'}",
        f"--kubeconfig={tmp / 'kubeconfig'}",
        "--leader-elect=true",
        "--configure-cloud-routes=false",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--kube-api-qps={qps[0]}",
        f"--kube-api-burst={qps[1]}",
        f"--node-status-update-frequency={period_s:g}s",
        f"--cloud-batch-size={BATCH}",
        f"--concurrent-node-syncs={node_syncs}",
    ]


def vm_kb(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


# -- the world over HTTP --------------------------------------------------------------------
def service(i: int, lb: bool) -> dict[str, Any]:
    name = f"{'lb' if lb else 'svc'}-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "labels": {LB_LABEL: str(lb).lower()}},
        "spec": {
            "type": "LoadBalancer" if lb else "ClusterIP",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }


async def create_services(api: httpx.AsyncClient, total: int, lbs: int) -> None:
    todo = iter(range(total))

    async def worker() -> None:
        for i in todo:
            body = service(i, lb=i < lbs)
            response = await api.post("/api/v1/namespaces/default/services", json=body)
            response.raise_for_status()

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(worker)


async def lb_ingress_count(api: httpx.AsyncClient) -> int:
    # Only the LoadBalancer Services: listing all 5,000 every second loaded the testbed.
    response = await api.get(
        "/api/v1/namespaces/default/services", params={"labelSelector": f"{LB_LABEL}=true"}
    )
    response.raise_for_status()
    return sum(
        1
        for item in response.json()["items"]
        if item["spec"].get("type") == "LoadBalancer"
        and (item.get("status", {}).get("loadBalancer", {}).get("ingress"))
    )


async def cloud_calls(cloud: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await cloud.get("/_sim/calls")
    response.raise_for_status()
    calls: list[dict[str, Any]] = response.json()["calls"]
    return calls


async def wait_ready(port: int, child: Any, limit_s: float) -> None:
    async with httpx.AsyncClient(verify=False) as client:  # noqa: S501 - the CCM's own cert
        with trio.fail_after(limit_s):
            while True:
                if child.poll() is not None:
                    raise RuntimeError(f"the CCM exited ({child.returncode}) before it was ready")
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(f"https://127.0.0.1:{port}/readyz")
                    if response.status_code == 200:
                        return
                await trio.sleep(0.05)


async def wait_lb_quiet(cloud: httpx.AsyncClient, quiet_s: float, limit_s: float) -> None:
    """Until the cloud has seen no load-balancer call for `quiet_s`."""
    with trio.move_on_after(limit_s):
        while True:
            calls = await cloud_calls(cloud)
            last = max((c["wall"] for c in calls if "LoadBalancer" in c["method"]), default=0.0)
            if time.time() - last >= quiet_s:
                return
            await trio.sleep(1.0)


async def count_nodes(api: httpx.AsyncClient, selector: str = "") -> int:
    params = {"limit": "1", **({"labelSelector": selector} if selector else {})}
    response = await api.get("/api/v1/nodes", params=params)
    response.raise_for_status()
    body = response.json()
    return len(body["items"]) + int(body["metadata"].get("remainingItemCount") or 0)


def say(text: str) -> None:
    """A progress line (the world of 100,000 Nodes takes minutes to build)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


INITIALISED_METRIC: Final = "node_controller_cloud_provider_taint_removal_delay_seconds_count"
IPAM_METRIC: Final = "node_ipam_controller_cidrset_cidrs_allocations_total"


async def ccm_metrics(port: int, client: httpx.AsyncClient | None = None) -> str | None:
    """The CCM's /metrics text; None on failure. Asked through `client` when given (kept
    open: one TLS handshake, not one a call)."""
    url = f"https://127.0.0.1:{port}/metrics"
    with contextlib.suppress(httpx.HTTPError):
        if client is not None:
            return (await client.get(url)).text
        async with httpx.AsyncClient(verify=False) as own:  # noqa: S501 - the CCM's own cert
            return (await own.get(url)).text
    return None


async def ccm_counters(port: int, client: httpx.AsyncClient | None = None) -> dict[str, float]:
    """The CCM's progress counters from its /metrics (summed over labels); {} on failure."""
    counts: dict[str, float] = {}
    for line in (await ccm_metrics(port, client) or "").splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in (INITIALISED_METRIC, IPAM_METRIC):
            counts[name] = counts.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


WRITE_VERBS: Final = ("PATCH", "PUT")
"""The verbs of a Node's initialisation (its status patch and its labels and taint)."""


async def ccm_writes(port: int) -> dict[str, float]:
    """The CCM's kube writes so far, from its client metrics: how many (`count`), their
    round trips and their waits for the client's QPS tokens, summed (`rtt_s`, `queued_s`);
    {} on failure."""
    sums = dict.fromkeys(("count", "rtt_s", "queued_s"), 0.0)
    names = {
        "rest_client_request_duration_seconds_count": "count",
        "rest_client_request_duration_seconds_sum": "rtt_s",
        "rest_client_rate_limiter_duration_seconds_sum": "queued_s",
    }
    text = await ccm_metrics(port)
    if text is None:
        return {}
    for line in text.splitlines():
        name = line.split("{")[0]
        if name in names and any(f'verb="{verb}"' in line for verb in WRITE_VERBS):
            sums[names[name]] += float(line.rsplit(" ", 1)[1])
    return sums


async def nodes_without_pod_cidr(api: httpx.AsyncClient) -> int:
    """A paged list of every Node (once the wave is done): how many have no pod CIDR yet."""
    missing, token = 0, ""
    while True:
        params = {"limit": "500", **({"continue": token} if token else {})}
        response = await api.get("/api/v1/nodes", params=params)
        response.raise_for_status()
        body = response.json()
        missing += sum(1 for item in body["items"] if not item.get("spec", {}).get("podCIDR"))
        token = body["metadata"].get("continue") or ""
        if not token:
            return missing


# -- one N -------------------------------------------------------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def run_one(sizes: Sizes, tmp: Path, tracemalloc_dir: str | None) -> Run:
    n = sizes.nodes
    run = Run(
        n,
        sizes.services,
        sizes.lb_services,
        mode="wave" if sizes.wave else "initialised",
        join=0 if sizes.wave else sizes.join,
        window_s=sizes.window_s,
    )
    started = time.monotonic()
    mode = "wave" if sizes.wave else "initialised"
    say(f"{n:,} Nodes ({mode}): starting the emulator, then the kubelets' process")
    emulator_args = [
        sys.executable,
        "-m",
        "trio_ccm_testbed.split",
        "emulator",
        "--seed=1",
        f"--kubeconfig-out={tmp / 'kubeconfig'}",
        f"--nodes={n}",  # the world's builder: registers them, as their kubelets would
        *([] if sizes.wave else ["--initialised"]),
        f"--lb-network={LB_NETWORK}",
        f"--progress-every={PROGRESS_EVERY}",
    ]
    with process(emulator_args, tmp / "emulator.log") as emulator:

        def built(line: str) -> None:
            if line.startswith("registered "):
                say(f"  building: {line}; RSS {rss_bytes(emulator.pid) / 2**20:,.0f} MB")

        listening = await trio.to_thread.run_sync(
            read_until, emulator, r"apiserver listening on (\S+)", 3600.0, built
        )
        api_url = listening.group(1)
        say(f"the emulator serves {n:,} Nodes after {time.monotonic() - started:.0f} s")
        kubelets_args = [
            sys.executable,
            "-m",
            "trio_ccm_testbed.split",
            "kubelets",
            f"--server={api_url}",
            f"--nodes={n}",
            *([] if sizes.wave else ["--initialised"]),
            "--registered",  # by the emulator's builder: the kubelets only heartbeat
            f"--lb-network={LB_NETWORK}",
            "--no-node-leases",
            f"--heartbeat={HEARTBEAT}",
            "--seed=1",
            f"--cloud-config-out={tmp / 'cloud.yaml'}",
            f"--progress-every={PROGRESS_EVERY}",
        ]
        with process(kubelets_args, tmp / "kubelets.log") as kubelets:

            def progress(line: str) -> None:
                if line.startswith("registered "):
                    say(
                        f"  building: {line}; RSS emulator "
                        f"{rss_bytes(emulator.pid) / 2**20:,.0f} MB, kubelets "
                        f"{rss_bytes(kubelets.pid) / 2**20:,.0f} MB"
                    )

            cloud_url = read_until(kubelets, r"sim cloud listening on (\S+)", 60).group(1)
            await trio.to_thread.run_sync(
                read_until, kubelets, r"nodes registered", 3600.0, progress
            )
            run.testbed_start_s = time.monotonic() - started
            say(f"{n:,} Nodes registered after {run.testbed_start_s:.0f} s; creating Services")
            limits = httpx.Limits(max_connections=8)
            async with (
                httpx.AsyncClient(base_url=api_url, limits=limits, timeout=120) as api,
                httpx.AsyncClient(base_url=cloud_url, timeout=120) as cloud,
            ):
                await create_services(api, sizes.services, sizes.lb_services)
                say(f"{sizes.services:,} Services created; starting the CCM")
                if sizes.wave:
                    await measured_wave(run, sizes, tmp, api, cloud, tracemalloc_dir)
                else:
                    world = {"emulator": emulator.pid, "kubelets": kubelets.pid}
                    await measured_ccm(run, sizes, tmp, api, cloud, tracemalloc_dir, world)
            run.emulator_rss_mb = rss_bytes(emulator.pid) / 2**20
            run.kubelets_rss_mb = rss_bytes(kubelets.pid) / 2**20
            run.testbed_rss_mb = run.emulator_rss_mb + run.kubelets_rss_mb
    stalls, run.lease_losses = stalls_and_losses(tmp / "ccm.log")
    run.ccm_stalls, run.ccm_max_stall_s = len(stalls), max(stalls, default=0.0)
    lags, steps, longest = emulator_lags(tmp / "emulator.log")
    run.testbed_lags, run.testbed_max_stall_s = lags, max(longest, *steps, 0.0)
    run.kubelets_max_stall_s = max(stalls_and_losses(tmp / "kubelets.log")[0], default=0.0)
    run.slowest_requests = slow_requests(tmp / "emulator.log")
    return run


async def measured_ccm(
    run: Run,
    sizes: Sizes,
    tmp: Path,
    api: httpx.AsyncClient,
    cloud: httpx.AsyncClient,
    tracemalloc_dir: str | None,
    world: dict[str, int],
) -> None:
    n = run.nodes
    before = len(await cloud_calls(cloud))
    port = free_port()
    env = {**os.environ}
    if tracemalloc_dir:
        env["TRIO_CCM_TRACEMALLOC"] = str(Path(tracemalloc_dir) / f"n{n}")
    t0 = time.monotonic()
    with process(ccm_args(tmp, port, sizes.window_s), tmp / "ccm.log", env=env) as ccm:
        await wait_ready(port, ccm, 1800)
        run.ready_s = time.monotonic() - t0
        say(f"CCM ready after {run.ready_s:.1f} s; ensuring {sizes.lb_services} LBs")
        # Settled: start-up's work done (the first address sync, every load balancer
        # ensured), then no load-balancer call for a while.
        with trio.move_on_after(1800):
            while True:  # polled: the state is in another process
                run.lbs_with_ingress = await lb_ingress_count(api)
                if run.lbs_with_ingress >= sizes.lb_services:
                    break
                await trio.sleep(1.0)
        await wait_lb_quiet(cloud, sizes.settle_quiet_s, 600)
        run.settle_s = time.monotonic() - t0
        calls = await cloud_calls(cloud)
        run.startup_cloud_calls = dict(Counter(c["method"] for c in calls[before:]))
        say(f"start-up settled after {run.settle_s:.0f} s; steady window of {sizes.window_s:g} s")
        # The steady window: one sync period, heartbeats arriving.
        mark, cpu0, w0 = len(calls), cpu_seconds(ccm.pid), time.monotonic()
        await trio.sleep(sizes.window_s)
        cpu1, w1 = cpu_seconds(ccm.pid), time.monotonic()
        run.steady_cpu_pct = 100 * (cpu1 - cpu0) / (w1 - w0)
        run.settled_rss_mb = vm_kb(ccm.pid, "VmRSS") / 1024
        calls = await cloud_calls(cloud)
        window = calls[mark:]
        run.cloud_calls_per_period = len(window)
        run.period_calls = dict(Counter(c["method"] for c in window))
        say(
            f"settled RSS {run.settled_rss_mb:.0f} MB, steady CPU {run.steady_cpu_pct:.1f} %; "
            f"{sizes.join:,} Nodes join"
        )
        pids = {**world, "ccm": ccm.pid}
        await join_and_push(run, sizes, api, cloud, len(calls), pids, tmp, ccm_port=port)
        say(
            f"join {run.join_1000_s:.1f} s (registered after {run.join_registered_s:.1f} s), "
            f"node-set push {run.nodeset_push_s:.1f} s"
        )
        if tracemalloc_dir:
            ccm.send_signal(signal.SIGUSR1)  # a last snapshot, at the largest the cache gets
            await trio.sleep(5 + n / 10_000)
        run.peak_rss_mb = vm_kb(ccm.pid, "VmHWM") / 1024
    run.go_calls_per_period = n
    run.go_join_calls = sizes.join
    run.go_nodeset_calls = sizes.lb_services


async def measured_wave(
    run: Run,
    sizes: Sizes,
    tmp: Path,
    api: httpx.AsyncClient,
    cloud: httpx.AsyncClient,
    tracemalloc_dir: str | None,
) -> None:
    """The CCM started against N new, tainted Nodes (IPAM on): it initialises every one (the
    wave), ensures the load balancers; then settles, and a steady window is measured."""
    n = run.nodes
    before = len(await cloud_calls(cloud))
    port = free_port()
    env = {**os.environ}
    if tracemalloc_dir:
        env["TRIO_CCM_TRACEMALLOC"] = str(Path(tracemalloc_dir) / f"wave-n{n}")
    t0 = time.monotonic()
    run.ipam = n <= IPAM_MAX_NODES
    if not run.ipam:
        say(f"IPAM off: one --cluster-cidr holds at most {IPAM_MAX_NODES:,} Node CIDRs")
    run.kube_qps, run.kube_burst = wave_qps(n, ipam=run.ipam)
    if (run.kube_qps, run.kube_burst) != QPS:
        say(
            f"kube QPS raised for this wave to {run.kube_qps}/{run.kube_burst} (deployed: "
            f"{QPS[0]}/{QPS[1]}): its {n:,} Nodes need "
            f"{n * (JOIN_WRITES_PER_NODE + run.ipam):,} writes, "
            f"{n * (JOIN_WRITES_PER_NODE + run.ipam) / QPS[0]:,.0f} s at {QPS[0]}/s"
        )
    run.node_syncs = wave_node_syncs(run.kube_qps)
    if run.node_syncs != NODE_SYNCS:
        say(
            f"--concurrent-node-syncs raised for this wave to {run.node_syncs} (deployed: "
            f"{NODE_SYNCS}): each holds its slot for 2 writes, so {NODE_SYNCS} make at most "
            f"{NODE_SYNCS / (2 * WAVE_WRITE_RTT_S):.0f} Nodes/s at a "
            f"{1000 * WAVE_WRITE_RTT_S:.0f} ms round trip"
        )
    args = ccm_args(
        tmp,
        port,
        sizes.window_s,
        ipam=run.ipam,
        qps=(run.kube_qps, run.kube_burst),
        node_syncs=run.node_syncs,
    )
    with process(args, tmp / "ccm.log", env=env) as ccm:
        await wait_ready(port, ccm, 1800)
        run.ready_s = time.monotonic() - t0
        say(f"CCM ready after {run.ready_s:.1f} s; the wave")
        nodes_done = lbs_done = 0.0
        shown, asked, asked_counted = time.monotonic(), -math.inf, False
        counts: dict[str, float] = {}
        async with httpx.AsyncClient(verify=False) as metrics:  # noqa: S501 - the CCM's cert
            with trio.move_on_after(sizes.wave_limit_s):
                while not (nodes_done and lbs_done):  # polled: the state is in another process
                    await trio.sleep(1.0)
                    counts = await ccm_counters(port, metrics) or counts
                    # Whether any Node still lacks the label is asked of the API only once the
                    # CCM counts every Node initialised (then every 5 s), and once a minute
                    # meanwhile: the emulator finds the first such Node by a scan from the
                    # first key, and at 80,000 Nodes initialised that scan cost it 3 s of CPU,
                    # every second, beside the wave. (A count by a label selector has no
                    # remainingItemCount.)
                    since = time.monotonic() - asked
                    counted = counts.get(INITIALISED_METRIC, 0) >= n
                    if not nodes_done and (
                        (counted and (since >= 5 or not asked_counted)) or since >= 60
                    ):
                        asked, asked_counted = time.monotonic(), counted
                        if not await count_nodes(api, f"!{TAINTLESS_LABEL}"):
                            nodes_done = asked - t0
                    if not lbs_done:
                        run.lbs_with_ingress = await lb_ingress_count(api)
                        if run.lbs_with_ingress >= sizes.lb_services:
                            lbs_done = time.monotonic() - t0
                    if time.monotonic() - shown >= 10:
                        shown = time.monotonic()
                        say(
                            f"  wave: {counts.get(INITIALISED_METRIC, 0):,.0f} of {n:,} Nodes "
                            f"initialised, {counts.get(IPAM_METRIC, 0):,.0f} pod CIDRs, "
                            f"{run.lbs_with_ingress} of {sizes.lb_services} LBs, "
                            f"RSS {vm_kb(ccm.pid, 'VmRSS') / 1024:.0f} MB"
                        )
        if not (nodes_done and lbs_done):
            # Cut at its limit (the run must print within its time): what it reached.
            counts = await ccm_counters(port) or counts
            run.wave_cut_nodes = int(counts.get(INITIALISED_METRIC, 0))
            run.wave_cut_s = time.monotonic() - t0
            run.wave_peak_rss_mb = vm_kb(ccm.pid, "VmHWM") / 1024
            rss_mb = vm_kb(ccm.pid, "VmRSS") / 1024
            say(
                f"wave CUT at its limit of {sizes.wave_limit_s:.0f} s: {run.wave_cut_nodes:,} "
                f"of {n:,} Nodes initialised after {run.wave_cut_s:.0f} s "
                f"({run.wave_cut_nodes / max(run.wave_cut_s - run.ready_s, 1):.0f} a second "
                f"since ready), {run.lbs_with_ingress} of {sizes.lb_services} LBs; RSS "
                f"{rss_mb:.0f} MB (peak {run.wave_peak_rss_mb:.0f}); no settled "
                "figures"
            )
            run.wave_lbs_s = lbs_done
            run.peak_rss_mb = run.wave_peak_rss_mb
            return
        run.wave_nodes_s, run.wave_lbs_s = nodes_done, lbs_done
        await wait_lb_quiet(cloud, sizes.settle_quiet_s, 600)
        calls = await cloud_calls(cloud)
        run.wave_cloud_calls = dict(Counter(c["method"] for c in calls[before:]))
        run.wave_peak_rss_mb = vm_kb(ccm.pid, "VmHWM") / 1024
        run.settle_s = time.monotonic() - t0
        say(
            f"wave done: Nodes {nodes_done:.1f} s, LBs {lbs_done:.1f} s, quiet after "
            f"{run.settle_s:.0f} s; RSS {vm_kb(ccm.pid, 'VmRSS') / 1024:.0f} MB (peak "
            f"{run.wave_peak_rss_mb:.0f}); settling {sizes.settle_extra_s:g} s"
        )
        await trio.sleep(sizes.settle_extra_s)
        calls = await cloud_calls(cloud)
        mark, cpu0, w0 = len(calls), cpu_seconds(ccm.pid), time.monotonic()
        say(f"steady window of {sizes.window_s:g} s")
        await trio.sleep(sizes.window_s)
        cpu1, w1 = cpu_seconds(ccm.pid), time.monotonic()
        run.steady_cpu_pct = 100 * (cpu1 - cpu0) / (w1 - w0)
        run.settled_rss_mb = vm_kb(ccm.pid, "VmRSS") / 1024
        window = (await cloud_calls(cloud))[mark:]
        run.cloud_calls_per_period = len(window)
        run.period_calls = dict(Counter(c["method"] for c in window))
        if tracemalloc_dir:
            ccm.send_signal(signal.SIGUSR1)
            await trio.sleep(5 + n / 10_000)
        run.peak_rss_mb = vm_kb(ccm.pid, "VmHWM") / 1024
        say(
            f"settled RSS {run.settled_rss_mb:.0f} MB (peak {run.peak_rss_mb:.0f}), steady CPU "
            f"{run.steady_cpu_pct:.1f} %"
        )
    run.go_calls_per_period = n


class JoinWatch:
    """Watches the Nodes that lack the instance-type label from a resourceVersion: each new
    Node comes (ADDED) uninitialised and leaves the selection (DELETED) once the CCM labels
    it. `registered_at` when the `count`-th has come, `done` once every one has left."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.added: set[str] = set()
        self.pending: set[str] = set()
        self.registered_at = 0.0
        self.done_at = 0.0
        self.done = trio.Event()

    async def run(
        self,
        api: httpx.AsyncClient,
        rv: str,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        params = {"watch": "1", "labelSelector": f"!{TAINTLESS_LABEL}", "timeoutSeconds": "3600"}
        started = False
        while not self.done.is_set():  # a stream the server ends is watched again from `rv`
            async with api.stream(
                "GET", "/api/v1/nodes", params={**params, "resourceVersion": rv}, timeout=None
            ) as response:
                response.raise_for_status()
                if not started:
                    started = True
                    task_status.started()
                async for line in response.aiter_lines():
                    if line:
                        rv = self.take(json.loads(line))

    def take(self, event: dict[str, Any]) -> str:
        """Count one watch event; its object's resourceVersion."""
        meta = event["object"]["metadata"]
        if event["type"] == "ERROR":
            raise RuntimeError(f"the join's watch failed: {event['object']}")
        name = meta.get("name", "")
        if event["type"] == "ADDED":
            self.added.add(name)
            self.pending.add(name)
            if len(self.added) == self.count:
                self.registered_at = time.monotonic()
        elif event["type"] == "DELETED":
            self.pending.discard(name)
        if len(self.added) >= self.count and not self.pending and not self.done.is_set():
            self.done_at = time.monotonic()
            self.done.set()
        return str(meta["resourceVersion"])


async def launch(cloud: httpx.AsyncClient, names: list[str]) -> None:
    """Launch these instances in one call of the simulated cloud's admin API
    (`POST /_sim/instance-batches`), as an autoscaler's burst launches many at once: one
    POST per instance, even 16 in flight, took 7.1 s at 100,000 Nodes and 19 s at 20,000
    on a loaded machine, the join's first part, measuring the bench's HTTP client."""
    instances = [{"name": name, "instanceType": "sim.large"} for name in names]
    response = await cloud.post("/_sim/instance-batches", json={"instances": instances})
    response.raise_for_status()


async def join_and_push(
    run: Run,
    sizes: Sizes,
    api: httpx.AsyncClient,
    cloud: httpx.AsyncClient,
    mark: int,
    pids: dict[str, int],
    tmp: Path,
    *,
    ccm_port: int | None = None,
) -> None:
    """Add `sizes.join` instances; time their Nodes' initialisation and the node-set pass.
    `pids`: the processes whose CPU over the join is reported (`join_cpu_pct`: which of
    them, if any, was busy all along). The cloud's calls from the join's start are kept in
    `tmp/join-cloud-calls.json` (with `--keep`: when each lookup came, at what pace). With
    `ccm_port`, the CCM's kube writes over the join (`join_writes`: how many, their mean
    round trip and mean wait for a QPS token, in ms): what bounds a Node's two writes."""
    n, join = run.nodes, sizes.join
    t0_wall = time.time()
    t0 = time.monotonic()
    cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
    writes0 = await ccm_writes(ccm_port) if ccm_port else {}
    # Timed by a watch of the Nodes lacking the label (the new ones until the CCM
    # initialises them): no scan of every Node per poll in the process that answers the CCM.
    since = (await api.get("/api/v1/nodes", params={"limit": "1"})).json()["metadata"]
    joined = JoinWatch(join)
    async with trio.open_nursery() as nursery:
        await nursery.start(joined.run, api, since["resourceVersion"])
        await launch(cloud, [f"join-{i:05d}" for i in range(join)])
        run.join_posted_s = time.monotonic() - t0
        with trio.fail_after(1800):
            await joined.done.wait()
        nursery.cancel_scope.cancel()
    took = time.monotonic() - t0
    run.join_cpu_pct = {
        name: round(100 * (cpu_seconds(pid) - cpu0[name]) / took, 1) for name, pid in pids.items()
    }
    writes1 = await ccm_writes(ccm_port) if ccm_port else {}
    if writes0 and writes1:
        count = writes1["count"] - writes0["count"]
        run.join_writes = {
            "writes": count,
            "rtt_ms": round(1000 * (writes1["rtt_s"] - writes0["rtt_s"]) / max(count, 1), 1),
            "queued_ms": round(
                1000 * (writes1["queued_s"] - writes0["queued_s"]) / max(count, 1), 1
            ),
        }
    run.join_registered_s = joined.registered_at - t0
    run.join_1000_s = joined.done_at - t0
    run.join_qps_bound_s = max(0.0, (JOIN_WRITES_PER_NODE * join - QPS[1]) / QPS[0])
    # The node-set pass starts once the set has been quiet for a second: give it that,
    # then wait until the load-balancer calls are quiet (at 5/s they come every 0.2 s).
    await trio.sleep(2.0)
    with trio.fail_after(1800):
        while True:  # every load balancer told (a call may take seconds at 100,000 Nodes);
            # a backends call with no answer in time is followed by a whole ensure (PUT),
            # which carries the node set too: counting only the former waited forever
            told = {
                c["target"]
                for c in (await cloud_calls(cloud))[mark:]
                if c["method"] in ("SetLoadBalancerBackends", "PutLoadBalancer")
                and c["status"] < 300
            }
            if len(told) >= sizes.lb_services:
                break
            await trio.sleep(1.0)
    # Quiet is not done when a pass needed a second one (the join spread over more than the
    # controller's wait) and a call in flight outlasts the quiet (a testbed stall): the
    # load balancers told first (sorted names) must also hold every Node.
    with trio.fail_after(1800):
        while True:
            await wait_lb_quiet(cloud, sizes.settle_quiet_s, 1800)
            calls = (await cloud_calls(cloud))[mark:]
            backends = [
                c for c in calls if c["method"] == "SetLoadBalancerBackends" and c["status"] < 300
            ]
            targets = sorted({c["target"] for c in backends})
            checked: dict[int, int] = {}
            for target in targets[:3] if n > 20_000 else targets:
                cluster, _, name = target.partition("/")
                response = await cloud.get(f"/v1/clusters/{cluster}/loadbalancers/{name}")
                response.raise_for_status()
                held = len(response.json()["nodes"])
                checked[held] = checked.get(held, 0) + 1
            if set(checked) == {n + join}:
                break
    (tmp / "join-cloud-calls.json").write_text(
        json.dumps({"join_started_wall": t0_wall, "calls": calls})
    )
    run.nodeset_checked = checked
    run.nodeset_push_s = max(c["wall"] for c in backends) - t0_wall
    run.nodeset_backend_calls = len(backends)
    run.join_cloud_calls = sum(1 for c in calls if "LoadBalancer" not in c["method"])
    run.nodeset_lb_budget_bound_s = max(0.0, (sizes.lb_services - LB_RATE[1]) / LB_RATE[0])


# -- growth, plot, table ----------------------------------------------------------------------
def growth(runs: list[Run]) -> dict[str, float | None]:
    """Between the smallest and the largest N of one mode."""
    if len(runs) < 2:
        return {"bytes_per_node": None, "cpu_pct_per_1000_nodes": None}
    small, large = runs[0], runs[-1]
    span = large.nodes - small.nodes
    return {
        "bytes_per_node": round((large.settled_rss_mb - small.settled_rss_mb) * 2**20 / span),
        "cpu_pct_per_1000_nodes": round(
            1000 * (large.steady_cpu_pct - small.steady_cpu_pct) / span, 3
        ),
    }


def plot(runs: list[Run], path: str) -> bool:
    """RSS and CPU against N (matplotlib, the `bench` extra); False when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed (pip install -e '.[bench]'): no plot at {path}")
        return False
    xs = [r.nodes for r in runs]
    fig, (rss, cpu) = plt.subplots(1, 2, figsize=(10, 4))
    rss.plot(xs, [r.settled_rss_mb for r in runs], "o-", label="settled")
    rss.plot(xs, [r.peak_rss_mb for r in runs], "s--", label="peak")
    rss.axhline(GOALS["rss_mb_100k"], color="grey", linestyle=":", label="goal at 100k")
    rss.set(xscale="log", xlabel="Nodes", ylabel="RSS of the CCM (MB)", title="Memory")
    rss.legend()
    cpu.plot(xs, [r.steady_cpu_pct for r in runs], "o-", label="steady, heartbeats every 5 min")
    cpu.axhline(GOALS["cpu_pct_100k"], color="grey", linestyle=":", label="goal at 100k")
    cpu.set(xscale="log", xlabel="Nodes", ylabel="CPU (% of one core)", title="CPU")
    cpu.legend()
    fig.suptitle("trio-ccm against a simulated cluster (5,000 Services, 250 LoadBalancer)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def print_table(runs: list[Run]) -> None:
    rows = [
        ("testbed up (s)", "testbed_start_s", "{:.0f}"),
        ("CCM kube QPS", "kube_qps", "{:,}"),
        ("CCM --concurrent-node-syncs", "node_syncs", "{:,}"),
        ("ready after start (s)", "ready_s", "{:.1f}"),
        ("wave: Nodes initialised (s)", "wave_nodes_s", "{:.1f}"),
        ("wave: LBs ready (s)", "wave_lbs_s", "{:.1f}"),
        ("wave: CUT, Nodes done by then", "wave_cut_nodes", "{:,}"),
        ("wave: CUT after (s)", "wave_cut_s", "{:.0f}"),
        ("wave: peak RSS at its end (MB)", "wave_peak_rss_mb", "{:.0f}"),
        ("peak RSS (MB)", "peak_rss_mb", "{:.0f}"),
        ("settled RSS (MB)", "settled_rss_mb", "{:.0f}"),
        ("steady CPU (% of a core)", "steady_cpu_pct", "{:.1f}"),
        ("cloud calls per sync period", "cloud_calls_per_period", "{:,}"),
        ("  Go: calls per period", "go_calls_per_period", "{:,}"),
        ("1,000-Node join (s)", "join_1000_s", "{:.1f}"),
        ("  of it, launching (s)", "join_posted_s", "{:.1f}"),
        ("  of it, registering (s)", "join_registered_s", "{:.1f}"),
        ("  bound by 200/400 (s)", "join_qps_bound_s", "{:.1f}"),
        ("  cloud calls", "join_cloud_calls", "{:,}"),
        ("node-set push to every LB (s)", "nodeset_push_s", "{:.1f}"),
        ("  bound by the LB budget (s)", "nodeset_lb_budget_bound_s", "{:.1f}"),
        ("  SetLoadBalancerBackends", "nodeset_backend_calls", "{:,}"),
        ("testbed RSS (MB)", "testbed_rss_mb", "{:.0f}"),
        ("  emulator (MB)", "emulator_rss_mb", "{:.0f}"),
        ("  kubelets and cloud (MB)", "kubelets_rss_mb", "{:.0f}"),
        ("Lease lost (times)", "lease_losses", "{:,}"),
        ("CCM steps >= 1 s", "ccm_stalls", "{:,}"),
        ("  longest (s)", "ccm_max_stall_s", "{:.2f}"),
        ("emulator's longest lag (s)", "testbed_max_stall_s", "{:.2f}"),
        ("  its lags >= 1 s", "testbed_lags", "{:,}"),
        ("kubelets' longest step (s)", "kubelets_max_stall_s", "{:.2f}"),
    ]
    print(f"{'':32}" + "".join(f"{r.nodes:>12,}" for r in runs))
    print(f"{'':32}" + "".join(f"{r.mode:>12}" for r in runs))
    for label, key, fmt in rows:
        print(f"{label:32}" + "".join(f"{fmt.format(getattr(r, key)):>12}" for r in runs))
    for r in runs:
        print(
            f"\n{r.nodes:,} Nodes: start-up cloud calls {r.startup_cloud_calls}; period calls "
            f"{r.period_calls}; LBs checked (Nodes held: LBs) {r.nodeset_checked} "
            f"(expected {r.nodes + r.join:,}); start-up settled after {r.settle_s:.0f} s with "
            f"{r.lbs_with_ingress} of {r.lb_services} load balancers ready"
        )
        if r.join_cpu_pct:
            print(f"  CPU over the join, % of a core: {r.join_cpu_pct}")
        if r.join_writes:
            print(f"  the CCM's kube writes over the join (mean ms): {r.join_writes}")
        for text in r.slowest_requests:
            print(f"  emulator's slow request: {text}")


# -- main ---------------------------------------------------------------------------------------
def initialised_figures(runs: list[Run]) -> dict[str, Any]:
    """The figures of the largest N started against initialised Nodes, and the growth."""
    largest = runs[-1]
    return {
        "nodes": largest.nodes,
        "ready_s": round(largest.ready_s, 2),
        "peak_rss_mb": round(largest.peak_rss_mb, 1),
        "settled_rss_mb": round(largest.settled_rss_mb, 1),
        "steady_cpu_pct": round(largest.steady_cpu_pct, 2),
        "cloud_calls_per_period": largest.cloud_calls_per_period,
        "join_1000_s": round(largest.join_1000_s, 2),
        "join_registered_s": round(largest.join_registered_s, 2),
        "join_posted_s": round(largest.join_posted_s, 2),
        "join_qps_bound_s": largest.join_qps_bound_s,
        "join_cpu_pct": largest.join_cpu_pct,
        "join_writes": largest.join_writes,
        "nodeset_push_s": round(largest.nodeset_push_s, 2),
        "nodeset_backend_calls": largest.nodeset_backend_calls,
        "go_calls_per_period": largest.go_calls_per_period,
        "go_join_calls": largest.go_join_calls,
        "go_nodeset_calls": largest.go_nodeset_calls,
        "lease_losses": largest.lease_losses,
        "ccm_stalls": largest.ccm_stalls,
        "ccm_max_stall_s": round(largest.ccm_max_stall_s, 2),
        "testbed_max_stall_s": round(largest.testbed_max_stall_s, 2),
        "testbed_lags": largest.testbed_lags,
        "testbed_start_s": round(largest.testbed_start_s, 1),
        "testbed_rss_mb": round(largest.testbed_rss_mb),
        **growth(runs),
    }


def wave_figures(runs: list[Run]) -> dict[str, Any]:
    """The figures of the largest N brought through a wave (`--wave`)."""
    largest = runs[-1]
    return {
        "wave_nodes": largest.nodes,
        "wave_kube_qps": f"{largest.kube_qps}/{largest.kube_burst}",
        "wave_ipam": largest.ipam,
        "wave_ready_s": round(largest.ready_s, 2),
        "wave_nodes_s": round(largest.wave_nodes_s, 2),
        "wave_lbs_s": round(largest.wave_lbs_s, 2),
        "wave_cut_nodes": largest.wave_cut_nodes,
        "wave_cut_s": round(largest.wave_cut_s, 1),
        "wave_peak_rss_mb": round(largest.wave_peak_rss_mb, 1),
        "wave_settled_rss_mb": round(largest.settled_rss_mb, 1),
        "wave_steady_cpu_pct": round(largest.steady_cpu_pct, 2),
        "wave_cloud_calls_per_period": largest.cloud_calls_per_period,
        "wave_lease_losses": largest.lease_losses,
        "wave_ccm_stalls": largest.ccm_stalls,
        "wave_testbed_max_stall_s": round(largest.testbed_max_stall_s, 2),
        "wave_testbed_lags": largest.testbed_lags,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, action="append", help="cluster sizes (repeatable)")
    parser.add_argument("--quick", action="store_true", help="100 Nodes, 40 Services, 10 joins")
    parser.add_argument("--services", type=int, help="Services (default 5000; quick 40)")
    parser.add_argument("--lb-services", type=int, help="of them LoadBalancer (250; quick 5)")
    parser.add_argument("--join", type=int, help="Nodes joining (1000; quick 10)")
    parser.add_argument("--window", type=float, help="steady window = sync period, s (60; 3)")
    parser.add_argument(
        "--wave",
        action="store_true",
        help="Nodes register new and tainted, IPAM on: the CCM initialises every one",
    )
    parser.add_argument(
        "--both", action="store_true", help="each N in both modes (initialised, then --wave)"
    )
    parser.add_argument(
        "--settle", type=float, help="--wave: seconds settled before the steady window (60; 1)"
    )
    parser.add_argument(
        "--wave-limit",
        type=float,
        help="--wave: cut a wave not done after this many seconds from the CCM's start, "
        "print how far it got (default 3600; 420 above 20,000 Nodes, so that a 100,000-Node "
        "run prints within 15 minutes)",
    )
    parser.add_argument("--plot", metavar="PNG", help="plot RSS and CPU against N to PNG")
    parser.add_argument("--tracemalloc", metavar="DIR", help="TRIO_CCM_TRACEMALLOC for the CCM")
    parser.add_argument(
        "--keep", metavar="DIR", help="keep each run's logs and files in DIR/nN (default: deleted)"
    )
    parser.add_argument(
        "--merge",  # with no --nodes, only merges (and plots)
        metavar="FILE",
        action="append",
        help="add the runs in an earlier run's output (its JSON line) to the table and plot",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    # --quick runs both modes (the keys of both are checked by tests/bench/test_quick.py).
    waves = [True] if args.wave else [False, True] if (quick or args.both) else [False]
    window = args.window or (3.0 if quick else 60.0)
    sizes = [
        Sizes(
            nodes=n,
            services=args.services or (40 if quick else 5000),
            lb_services=args.lb_services or (5 if quick else 250),
            join=args.join or (10 if quick else 1000),
            window_s=window,
            settle_quiet_s=1.0 if quick else 5.0,
            wave=wave,
            settle_extra_s=args.settle if args.settle is not None else (1.0 if quick else 60.0),
            wave_limit_s=args.wave_limit or (420.0 if n > 20_000 else 3600.0),
        )
        for n in (args.nodes or ([] if args.merge else [100] if quick else DEFAULT_NODES))
        for wave in waves
    ]
    print(
        "scale: trio-ccm in its own process, as deployed, against the split testbed (emulator;"
        " kubelets and cloud) in two others;"
        f" {args.services or 5000:,} Services ({args.lb_services or 250} LoadBalancer)"
    )
    print(machine_line() + "\n", flush=True)
    started = time.monotonic()

    def one(size: Sizes) -> Run:
        mode = "wave" if size.wave else "initialised"
        if args.keep:
            kept = Path(args.keep) / f"{'wave-' if size.wave else ''}n{size.nodes}"
            kept.mkdir(parents=True, exist_ok=True)
            run = trio.run(run_one, size, kept, args.tracemalloc)
        else:
            with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
                run = trio.run(run_one, size, Path(tmp), args.tracemalloc)
        say(f"{size.nodes:,} Nodes ({mode}) done after {time.monotonic() - started:.0f} s")
        return run

    if quick:
        # Only proves the bench runs (make test): both modes' worlds at once, each in a
        # thread of its own (its own trio.run, ports and files); its figures are not ones
        # to quote. A measured run takes one world at a time.
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(sizes) or 1) as pool:
            runs = list(pool.map(one, sizes))
    else:
        runs = [one(size) for size in sizes]
    for earlier in args.merge or ():
        lines = Path(earlier).read_text().strip().splitlines()
        runs += [Run(**r) for r in json.loads(lines[-1])["runs"]]
    runs.sort(key=lambda r: (r.nodes, r.mode))
    print_table(runs)
    initialised = [r for r in runs if r.mode == "initialised"]
    waved = [r for r in runs if r.mode == "wave"]
    plotted = bool(args.plot) and plot(initialised or waved, args.plot)
    figures: dict[str, Any] = {}
    if initialised:
        figures.update(initialised_figures(initialised))
    if waved:
        figures.update(wave_figures(waved))
    figures.update(
        {
            "goals": GOALS,
            "plot": args.plot if plotted else None,
            "wall_s": round(time.monotonic() - started, 1),
            "runs": [asdict(r) for r in runs],
        }
    )
    print_figures(figures)


if __name__ == "__main__":
    main()
