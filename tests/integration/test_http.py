"""The :10258 server over real loopback sockets: health output, metrics, debug JSON, TLS."""

from __future__ import annotations

import json
import ssl
from functools import partial
from typing import Any

import httpx
import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from structlog.testing import capture_logs

from trio_ccm.health import Check, Endpoints, serve_http

LIMIT_S = 10  # real sockets, real clock: a generous bound that still fails a hang fast


def make_endpoints(
    failing: dict[str, str] | None = None, registry: CollectorRegistry | None = None
) -> Endpoints:
    """Checks named like the CCM's; `failing` maps a check name to the reason it fails."""
    reasons = failing or {}

    def check(name: str) -> Check:
        return Check(name, lambda: reasons.get(name))

    ping, leader, synced = check("ping"), check("leaderElection"), check("informer-sync")
    return Endpoints(
        livez=[ping],
        readyz=[leader, synced],
        healthz=[ping, leader, synced],
        registry=registry or CollectorRegistry(),
        configz=lambda: {"generic": {"controllers": ["*"], "leaderElect": True}},
        debug_actors=lambda: {"service-lb-controller": {"default/web": {"state": "idle"}}},
    )


async def start(nursery: trio.Nursery, endpoints: Endpoints, **kwargs: Any) -> int:
    return await nursery.start(
        partial(serve_http, endpoints, bind_address="127.0.0.1", port=0, **kwargs)
    )


async def get(url: str, **client_kwargs: object) -> httpx.Response:
    with trio.fail_after(LIMIT_S):
        async with httpx.AsyncClient(**client_kwargs) as client:  # type: ignore[arg-type]
            return await client.get(url)


SYNC_FAILING = {"informer-sync": "1 informer not synced"}


@pytest.mark.parametrize(
    ("path", "failing", "status", "body"),
    [
        pytest.param("/healthz", {}, 200, "ok", id="healthy"),
        pytest.param("/livez", {}, 200, "ok", id="livez-healthy"),
        pytest.param(
            "/healthz?verbose",
            {},
            200,
            "[+]ping ok\n[+]leaderElection ok\n[+]informer-sync ok\nhealthz check passed\n",
            id="verbose",
        ),
        pytest.param("/livez?verbose", {}, 200, "[+]ping ok\nlivez check passed\n", id="livez"),
        pytest.param(
            "/readyz?verbose=true",
            {},
            200,
            "[+]leaderElection ok\n[+]informer-sync ok\nreadyz check passed\n",
            id="readyz",
        ),
        pytest.param(
            "/readyz",
            SYNC_FAILING,
            500,
            "[+]leaderElection ok\n[-]informer-sync failed: reason withheld\nreadyz check failed\n",
            id="failing-lists-all",
        ),
        pytest.param(
            "/healthz?verbose",
            {**SYNC_FAILING, "ping": "stuck"},
            500,
            "[-]ping failed: reason withheld\n[+]leaderElection ok\n"
            "[-]informer-sync failed: reason withheld\nhealthz check failed\n",
            id="failing-verbose",
        ),
        pytest.param("/livez", SYNC_FAILING, 200, "ok", id="other-endpoint-unaffected"),
        pytest.param("/readyz?exclude=informer-sync", SYNC_FAILING, 200, "ok", id="exclude"),
        pytest.param(
            "/readyz?verbose&exclude=informer-sync",
            SYNC_FAILING,
            200,
            "[+]leaderElection ok\n[+]informer-sync excluded: ok\nreadyz check passed\n",
            id="exclude-verbose",
        ),
        pytest.param(
            "/healthz?exclude=ping&exclude=informer-sync&verbose",
            {**SYNC_FAILING, "ping": "stuck"},
            200,
            "[+]ping excluded: ok\n[+]leaderElection ok\n[+]informer-sync excluded: ok\n"
            "healthz check passed\n",
            id="exclude-repeated",
        ),
        pytest.param(
            "/livez?verbose&exclude=nope&exclude=also",
            {},
            200,
            "[+]ping ok\n"
            'warn: some health checks cannot be excluded: no matches for "also","nope"\n'
            "livez check passed\n",
            id="exclude-unknown-verbose",
        ),
        pytest.param("/livez?exclude=nope", {}, 200, "ok", id="exclude-unknown-quiet"),
        pytest.param(
            "/readyz?exclude=nope",
            SYNC_FAILING,
            500,
            "[+]leaderElection ok\n[-]informer-sync failed: reason withheld\n"
            'warn: some health checks cannot be excluded: no matches for "nope"\n'
            "readyz check failed\n",
            id="exclude-unknown-failing",
        ),
        pytest.param("/readyz/informer-sync", {}, 200, "ok", id="single-healthy"),
        pytest.param("/healthz/ping", {}, 200, "ok", id="single-healthz"),
        pytest.param(
            "/readyz/informer-sync",
            SYNC_FAILING,
            500,
            "internal server error: reason withheld\n",
            id="single-failing",
        ),
        pytest.param("/readyz/leaderElection", SYNC_FAILING, 200, "ok", id="single-other-passes"),
    ],
)
async def test_health_output_matches_upstream(
    nursery: trio.Nursery, path: str, failing: dict[str, str], status: int, body: str
) -> None:
    """Health endpoints answer with k8s.io/apiserver's status codes and exact text."""
    port = await start(nursery, make_endpoints(failing), plain_http=True)
    response = await get(f"http://127.0.0.1:{port}{path}")
    assert (response.status_code, response.text) == (status, body)
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["x-content-type-options"] == "nosniff"


async def test_failure_reason_is_logged_not_served(nursery: trio.Nursery) -> None:
    """A failing probe's reason goes to the log by key and never into the response."""
    port = await start(nursery, make_endpoints(SYNC_FAILING), plain_http=True)
    with capture_logs() as logs:
        response = await get(f"http://127.0.0.1:{port}/readyz?verbose")
    assert response.status_code == 500
    assert "not synced" not in response.text
    failed = [entry for entry in logs if entry["event"] == "healthcheck.failed"]
    assert failed == [
        {
            "event": "healthcheck.failed",
            "log_level": "info",
            "endpoint": "readyz",
            "check": "informer-sync",
            "reason": "1 informer not synced",
        }
    ]


async def test_metrics_serves_the_given_registry(nursery: trio.Nursery) -> None:
    """/metrics renders the caller's registry in the Prometheus text format."""
    registry = CollectorRegistry()
    Counter("trio_ccm_test_things", "Things counted by the test.", registry=registry).inc(3)
    port = await start(nursery, make_endpoints(registry=registry), plain_http=True)
    response = await get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    assert "# TYPE trio_ccm_test_things_total counter\n" in response.text
    assert "trio_ccm_test_things_total 3.0\n" in response.text


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param(
            "/configz", {"generic": {"controllers": ["*"], "leaderElect": True}}, id="configz"
        ),
        pytest.param(
            "/debug/actors",
            {"service-lb-controller": {"default/web": {"state": "idle"}}},
            id="debug-actors",
        ),
    ],
)
async def test_json_views(nursery: trio.Nursery, path: str, expected: object) -> None:
    """/configz and /debug/actors serve the caller's mappings as JSON."""
    port = await start(nursery, make_endpoints(), plain_http=True)
    response = await get(f"http://127.0.0.1:{port}{path}")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == expected


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/", 404, id="root"),
        pytest.param("GET", "/healthz/", 404, id="trailing-slash"),
        pytest.param("GET", "/healthz/nope", 404, id="unknown-check"),
        pytest.param("GET", "/livez/leaderElection", 404, id="check-of-another-endpoint"),
        pytest.param("GET", "/metrics/slis", 404, id="metrics-slis"),
        pytest.param("GET", "/debug/pprof/", 404, id="pprof"),
        pytest.param("POST", "/nope", 404, id="unknown-path-any-method"),
        pytest.param("POST", "/healthz", 405, id="post-healthz"),
        pytest.param("PUT", "/metrics", 405, id="put-metrics"),
        pytest.param("DELETE", "/configz", 405, id="delete-configz"),
        pytest.param("HEAD", "/readyz/informer-sync", 405, id="head-single-check"),
    ],
)
async def test_unknown_paths_and_methods(
    nursery: trio.Nursery, method: str, path: str, status: int
) -> None:
    """Unknown paths answer 404 and known paths answer 405 to anything but GET."""
    port = await start(nursery, make_endpoints(), plain_http=True)
    with trio.fail_after(LIMIT_S):
        async with httpx.AsyncClient() as client:
            response = await client.request(method, f"http://127.0.0.1:{port}{path}")
    assert response.status_code == status
    if status == 405:
        assert response.headers["allow"] == "GET"


async def test_https_by_default(nursery: trio.Nursery) -> None:
    """Without certificate files the server speaks HTTPS with a self-signed certificate."""
    port = await start(nursery, make_endpoints())
    response = await get(f"https://127.0.0.1:{port}/healthz", verify=False)
    assert (response.status_code, response.text) == (200, "ok")
    with pytest.raises(httpx.ConnectError):
        await get(f"https://127.0.0.1:{port}/healthz")


async def test_self_signed_certificate_names_loopback(nursery: trio.Nursery) -> None:
    """The minted certificate is self-signed for localhost and the bind address, and verifies."""
    port = await start(nursery, make_endpoints())
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    with trio.fail_after(LIMIT_S):
        stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=insecure)
        await stream.do_handshake()
        der = stream.getpeercert(binary_form=True)
        await stream.aclose()
    cert = x509.load_der_x509_certificate(der)
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "localhost"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}

    trusting = ssl.create_default_context(
        cadata=cert.public_bytes(serialization.Encoding.PEM).decode()
    )
    response = await get(f"https://127.0.0.1:{port}/livez", verify=trusting)
    assert (response.status_code, response.text) == (200, "ok")


async def test_given_certificate_files_are_served(nursery: trio.Nursery, tmp_path) -> None:
    """--tls-cert-file/--tls-private-key-file are served and verify against their CA."""
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    key_file.write_bytes(issued.private_key_pem.bytes())
    port = await start(
        nursery,
        make_endpoints(),
        tls_cert_file=str(cert_file),
        tls_private_key_file=str(key_file),
    )
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    response = await get(f"https://127.0.0.1:{port}/readyz?verbose", verify=trusting)
    assert response.status_code == 200
    assert response.text.endswith("readyz check passed\n")


async def test_certificate_without_key_is_refused(tmp_path) -> None:
    """A certificate file without its key (or the reverse) is a configuration error."""
    with trio.fail_after(LIMIT_S), pytest.raises(ValueError, match="must be given together"):
        await serve_http(make_endpoints(), port=0, tls_cert_file=str(tmp_path / "tls.crt"))


async def test_readiness_reports_the_bound_port(nursery: trio.Nursery) -> None:
    """task_status carries the port actually bound when port 0 is asked for."""
    port = await start(nursery, make_endpoints(), plain_http=True)
    assert port > 0
    response = await get(f"http://127.0.0.1:{port}/configz")
    assert json.loads(response.content)["generic"]["leaderElect"] is True
