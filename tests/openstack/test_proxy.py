"""The fault proxy on its own, in front of a small loopback backend (no OpenStack needed):
what it forwards, what each fault answers, and what it logs."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from trio_ccm_testbed._http import Request, Response, serve_http1
from trio_ccm_testbed.openstack import Faults, Layout, Ports, serve_proxy


class Backend:
    """Answers every request with a JSON document naming it, and records it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, bytes]] = []

    async def __call__(self, request: Request) -> Response:
        self.seen.append(
            (request.method, request.raw_path, request.headers.get("host", ""), request.body)
        )
        body = b'{"answer": "%s %s", "padding": "0123456789"}' % (
            request.method.encode(),
            request.raw_path.encode(),
        )
        return Response(200, body, [("Content-Type", "application/json")])


async def _open(nursery: trio.Nursery, tmp_path: Path) -> tuple[Backend, Faults, dict[str, int]]:
    backend = Backend()
    port = await nursery.start(partial(serve_http1, backend, host="127.0.0.1", port=0))
    names = Ports.from_base(0).all()
    ports = Ports.from_base(
        0, **{name: (0 if name.startswith("proxy_") else port) for name in names}
    )
    faults = Faults()
    bound = await nursery.start(serve_proxy, Layout(tmp_path, ports), faults)
    return backend, faults, bound


async def test_forwards_as_sent_and_logs(tmp_path: Path) -> None:
    """A request reaches the service with its method, path, query, body and Host header
    (so the links the service writes name the proxy), and the log has it by service."""
    async with trio.open_nursery() as nursery:
        backend, faults, bound = await _open(nursery, tmp_path)
        url = f"http://127.0.0.1:{bound['compute']}"
        async with httpx.AsyncClient() as client:
            answer = await client.post(url + "/v2.1/servers?x=1", json={"a": 1})
        assert answer.json()["answer"] == "POST /v2.1/servers"
        ((method, path, host, body),) = backend.seen
        assert (method, path, body) == ("POST", "/v2.1/servers", b'{"a":1}')
        assert host == f"127.0.0.1:{bound['compute']}"
        assert faults.seen("compute") == [("POST", "/v2.1/servers?x=1")]
        assert faults.seen("network") == []
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("fault", "status", "header", "forwarded"),
    [
        pytest.param({"status": 401}, 401, ("www-authenticate", "Keystone"), 0, id="401"),
        pytest.param(
            {"status": 429, "retry_after_s": 1.2}, 429, ("retry-after", "2"), 0, id="429-rounded"
        ),
        pytest.param({"status": 503, "apply_after": True}, 503, None, 1, id="apply-after"),
        pytest.param({"truncate": True}, 200, None, 1, id="truncate"),
    ],
)
async def test_fault_once_then_real(tmp_path: Path, fault, status, header, forwarded) -> None:
    """A fault answers its one matching request (forwarding it first with apply_after, or
    the real answer cut in half with truncate); the next request is forwarded untouched."""
    async with trio.open_nursery() as nursery:
        backend, faults, bound = await _open(nursery, tmp_path)
        url = f"http://127.0.0.1:{bound['network']}/v2.0/ports"
        faults.add("network", method="PUT", path="/ports", **fault)
        async with httpx.AsyncClient() as client:
            whole = await client.get(url)  # not PUT: not matched
            faulted = await client.put(url)
            real = await client.put(url)
        assert whole.status_code == 200
        assert faulted.status_code == status
        if header is not None:
            assert faulted.headers[header[0]].startswith(header[1])
        if fault.get("truncate"):
            assert faulted.content == real.content[: len(real.content) // 2]
        assert [m for m, *_ in backend.seen] == ["GET"] + ["PUT"] * forwarded + ["PUT"]
        assert real.status_code == 200
        nursery.cancel_scope.cancel()


async def test_slow_answer_waits_then_forwards(tmp_path: Path) -> None:
    """`delay_s` holds the request at least that long, then forwards it."""
    async with trio.open_nursery() as nursery:
        backend, faults, bound = await _open(nursery, tmp_path)
        faults.add("image", delay_s=0.5)
        async with httpx.AsyncClient() as client:
            began = trio.current_time()
            answer = await client.get(f"http://127.0.0.1:{bound['image']}/v2/images")
        assert trio.current_time() - began >= 0.5
        assert answer.status_code == 200
        assert len(backend.seen) == 1
        nursery.cancel_scope.cancel()


def test_faults_refuse_nonsense() -> None:
    """An unknown service, a bad status or a rule that changes nothing is refused."""
    faults = Faults()
    with pytest.raises(ValueError, match="the proxy fronts"):
        faults.add("dns", status=500)
    with pytest.raises(ValueError, match=r"100\.\.599"):
        faults.add("compute", status=42)
    with pytest.raises(ValueError, match="needs a status"):
        faults.add("compute")


class Keystone(Backend):
    """Also answers a token request with an `X-Subject-Token` naming the user."""

    async def __call__(self, request: Request) -> Response:
        answer = await super().__call__(request)
        if request.raw_path == "/v3/auth/tokens":
            answer.headers.append(("X-Subject-Token", f"token-{len(self.seen)}"))
        return answer


async def test_arrivals_are_dated_and_name_the_user_of_the_token(tmp_path: Path) -> None:
    """With arrivals recorded, each request is kept with its wall-clock arrival and the user
    whose password authentication issued its token; only writes to services are mutating,
    a token request is not, and an unknown token has no user."""
    async with trio.open_nursery() as nursery:
        backend = Keystone()
        port = await nursery.start(partial(serve_http1, backend, host="127.0.0.1", port=0))
        names = Ports.from_base(0).all()
        ports = Ports.from_base(
            0, **{name: (0 if name.startswith("proxy_") else port) for name in names}
        )
        faults = Faults()
        bound = await nursery.start(serve_proxy, Layout(tmp_path, ports), faults)
        faults.record_arrivals()
        auth = {"auth": {"identity": {"password": {"user": {"name": "chaos-r1"}}}}}
        before = time.time()
        async with httpx.AsyncClient() as client:
            issued = await client.post(
                f"http://127.0.0.1:{bound['identity']}/v3/auth/tokens", json=auth
            )
            token = issued.headers["x-subject-token"]
            lb = f"http://127.0.0.1:{bound['load-balancer']}/v2/lbaas/loadbalancers"
            await client.post(lb, json={}, headers={"X-Auth-Token": token})
            await client.get(lb, headers={"X-Auth-Token": token})
            await client.delete(lb + "/x", headers={"X-Auth-Token": "unknown"})
        arrivals = faults.arrivals()
        assert [(a.service, a.method, a.user, a.mutating) for a in arrivals] == [
            ("identity", "POST", "", False),
            ("load-balancer", "POST", "chaos-r1", True),
            ("load-balancer", "GET", "chaos-r1", False),
            ("load-balancer", "DELETE", "", True),
        ]
        assert before <= arrivals[0].at <= arrivals[-1].at <= time.time()
        nursery.cancel_scope.cancel()


async def test_writes_peak_counts_the_writes_held_at_once(tmp_path: Path) -> None:
    """Three POSTs held by a delay at once are a peak of three writes; reads and token
    requests are not writes; `clear()` starts the count again."""
    async with trio.open_nursery() as nursery:
        _, faults, bound = await _open(nursery, tmp_path)
        faults.add("load-balancer", method="POST", delay_s=0.5, times=3)
        url = f"http://127.0.0.1:{bound['load-balancer']}/v2/lbaas/loadbalancers"
        async with httpx.AsyncClient() as client, trio.open_nursery() as calls:
            for _ in range(3):
                calls.start_soon(partial(client.post, url, json={}))
            for _ in range(4):
                calls.start_soon(client.get, url)
            keystone = f"http://127.0.0.1:{bound['identity']}/v3/auth/tokens"
            calls.start_soon(partial(client.post, keystone, json={}))
        assert faults.writes_peak("load-balancer") == 3
        assert faults.writes_peak("identity") == 0
        faults.clear()
        assert faults.writes_peak("load-balancer") == 0
        nursery.cancel_scope.cancel()
