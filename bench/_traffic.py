"""Traffic through every load balancer during a chaos run (bench/chaos.py, process mode).

The chaos testbed runs with a loopback load-balancer pool, so its load balancers carry
traffic to the Nodes' NodePorts and simulated pods (docs/sim-cloud.md, "The data plane").
`Traffic.serve` sends requests for the whole run at a bounded rate (`rate_per_s`), round
robin over every port of every LoadBalancer Service that has an EXTERNAL-IP (re-read every
0.5 s), each a new connection from 127.0.0.1 with a 2 s deadline; every address is checked
to be loopback before anything is sent. A Service whose source ranges leave 127.0.0.1 out is
not sent to (the load balancer refuses it, as it should).

Each failed request is put down to a cause, the first that applies of:

- `service-changed`: its Service was changed (ports, type, source ranges, annotation) or
  deleted in the `window_s` before it, or the port it was sent to was not (yet, or no
  longer) a listener of the load balancer (`/_sim/dataplane`, read with the Services: the
  CCM had not carried the Service's change to the cloud);
- `node-removed`: an instance was terminated or a Node deleted in the window (connections
  in flight on that Node are cut; new ones go elsewhere);
- `node-added`: an instance was added in the window;
- `leader-killed`: a kill point hit a replica in the window;
- `other`: none of these.

The causes are read from time alone (what happened just before), not from the failure.
"""

from __future__ import annotations

import ipaddress
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import trio

from trio_ccm_testbed.loopback import is_loopback
from trio_ccm_testbed.traffic import TrafficError, http_get

SERVICES_PATH: Final = "/api/v1/namespaces/default/services"
CLIENT: Final = "127.0.0.1"
CAUSES: Final = ("service-changed", "node-removed", "node-added", "leader-killed", "other")
_REQUEST_S: Final = 2.0
_REFRESH_S: Final = 0.5


@dataclass
class Traffic:
    """Requests sent through the load balancers, and what happened around the run."""

    api: httpx.AsyncClient
    cloud: httpx.AsyncClient
    rate_per_s: float = 40.0
    window_s: float = 10.0
    sent: int = 0
    answered: int = 0
    failures: list[tuple[float, str, str]] = field(default_factory=list)  # (at, service, error)
    changes: list[tuple[float, str, str]] = field(default_factory=list)  # (at, kind, service)
    targets: list[tuple[str, str, int]] = field(default_factory=list)  # (service, ip, port)
    skipped: Counter[str] = field(default_factory=Counter)
    listening: set[tuple[str, int]] = field(default_factory=set)  # the data plane's, lately
    unserved: set[int] = field(default_factory=set)  # failures whose port was not listening

    def note(self, kind: str, service: str = "") -> None:
        """Something the workload did (a Service changed, an instance added or removed)."""
        self.changes.append((time.time(), kind, service))

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._refresh_forever)
            limiter = trio.Semaphore(16)  # requests in flight at most
            for index in itertools.count():
                await trio.sleep(1.0 / self.rate_per_s)
                if not self.targets:
                    continue
                target = self.targets[index % len(self.targets)]
                await limiter.acquire()
                nursery.start_soon(self._one, target, limiter)

    async def _refresh_forever(self) -> None:
        while True:
            try:
                response = await self.api.get(SERVICES_PATH)
                response.raise_for_status()
                self.targets = self._targets(response.json()["items"])
                plane = await self.cloud.get("/_sim/dataplane")
                plane.raise_for_status()
                self.listening = {
                    (lb["ip"], listener["port"])
                    for lb in plane.json()["loadBalancers"]
                    for listener in lb["listeners"]
                    if listener["listening"]
                }
            except (httpx.HTTPError, KeyError, ValueError):
                pass  # the testbed is busy: keep the last targets
            await trio.sleep(_REFRESH_S)

    def _targets(self, services: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
        found = []
        for svc in services:
            spec, name = svc.get("spec", {}), svc["metadata"]["name"]
            ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
            if spec.get("type") != "LoadBalancer" or not ingress or not ingress[0].get("ip"):
                continue
            address = ingress[0]["ip"]
            if not is_loopback(address):
                self.skipped["not-loopback"] += 1
                continue
            ranges = spec.get("loadBalancerSourceRanges") or ["0.0.0.0/0"]
            client = ipaddress.ip_address(CLIENT)
            if not any(client in ipaddress.ip_network(r, strict=False) for r in ranges):
                self.skipped["source-ranges"] += 1
                continue
            found += [(name, address, int(p["port"])) for p in spec.get("ports", [])]
        return found

    async def _one(self, target: tuple[str, str, int], limiter: trio.Semaphore) -> None:
        service, address, port = target
        self.sent += 1
        try:
            with trio.fail_after(_REQUEST_S):
                (await http_get(address, port, source=CLIENT)).answer()
            self.answered += 1
        except (TrafficError, trio.TooSlowError) as exc:
            if (address, port) not in self.listening:
                self.unserved.add(len(self.failures))
            self.failures.append((time.time(), service, f"{type(exc).__name__}: {exc}"))
        finally:
            limiter.release()

    def cause(self, at: float, service: str, kill_points: list[float]) -> str:
        since = at - self.window_s
        recent = [(kind, name) for when, kind, name in self.changes if since <= when <= at]
        if any(kind == "service" and name == service for kind, name in recent):
            return "service-changed"
        if any(kind in ("instance-terminate", "node-delete") for kind, _ in recent):
            return "node-removed"
        if any(kind == "instance-add" for kind, _ in recent):
            return "node-added"
        if any(since <= when <= at for when in kill_points):
            return "leader-killed"
        return "other"

    def figures(self, kill_points: list[float]) -> dict[str, Any]:
        causes: Counter[str] = Counter()
        examples: dict[str, list[str]] = {}
        for index, (at, svc, error) in enumerate(self.failures):
            if index in self.unserved:
                cause = "service-changed"
            else:
                cause = self.cause(at, svc, kill_points)
            causes[cause] += 1
            if len(examples.setdefault(cause, [])) < 3:
                examples[cause].append(f"{svc}: {error}")
        return {
            "requests_sent": self.sent,
            "requests_answered": self.answered,
            "requests_failed": len(self.failures),
            "requests_failed_by_cause": {c: causes[c] for c in CAUSES if causes[c]},
            "requests_failed_examples": examples,
            "targets_skipped": dict(self.skipped),
        }
