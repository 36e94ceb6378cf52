"""moto in server mode on 127.0.0.1, in a thread of this process, behind `Faults`.

`MotoServer.start()` applies the fidelity patches (`patches.py`), builds moto's WSGI app,
wraps it in the fault middleware and serves it with werkzeug (threaded) on a free loopback
port; `url` is where to point `[ServiceOverride]` endpoints. werkzeug's access log is
silenced (one line per request otherwise). `reset()` empties every moto backend
(`POST /moto-api/reset`, about 0.25 s) and the fault rules and counters: use one server for
a whole test session and reset it per test (the first EC2 call of a process costs about
1 s, moto loading its AMIs).

`auth_mode()` turns on moto's request authentication (its INITIAL_NO_AUTH_ACTION_COUNT):
an IAM user with a policy allowing `actions` is made, and from then on every request's
SigV4 signature is verified and its action authorised.

The start, stop and reset methods block (run them in a worker thread under Trio);
`open_moto()` does that for Trio code.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Final

import trio

from trio_ccm_testbed.aws.faults import HARNESS_AGENT, Faults
from trio_ccm_testbed.aws.patches import apply_patches

__all__ = ["TEST_CREDENTIALS", "MotoServer", "StaticKeys", "open_moto"]


@dataclass(frozen=True, slots=True)
class StaticKeys:
    access_key_id: str
    secret_access_key: str


TEST_CREDENTIALS: Final = StaticKeys("AKIATESTTESTTESTTEST", "test-secret-key")
_STOP_S: Final = 5.0


class MotoServer:
    """moto on loopback (see the module docstring)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.faults = Faults()
        self._clients: dict[tuple[str, str], Any] = {}
        self._clients_lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("MotoServer: call start() first")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> MotoServer:
        if self._server is not None:
            return self
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        apply_patches()
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            self.host,
            self.port,
            self.faults.wrap(app),
            threaded=True,
            request_handler=MotoRequestHandler,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="moto-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(_STOP_S)
        self._server = None
        self._thread = None
        self._clients.clear()

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def client(self, service: str, region: str = "us-east-1") -> Any:
        """A boto3 client of this server for the test world's own calls (blocking; kept and
        shared, as boto3 clients are thread-safe and take 0.2 s to build). Its requests are
        marked so the fault middleware neither faults nor counts them."""
        key = (service, region)
        with self._clients_lock:
            found = self._clients.get(key)
            if found is None:
                import boto3
                from botocore.config import Config

                found = boto3.client(
                    service,
                    region_name=region,
                    endpoint_url=self.url,
                    aws_access_key_id=TEST_CREDENTIALS.access_key_id,
                    aws_secret_access_key=TEST_CREDENTIALS.secret_access_key,
                    config=Config(
                        user_agent_extra=HARNESS_AGENT,
                        retries={"max_attempts": 1, "mode": "standard"},
                    ),
                )
                self._clients[key] = found
            return found

    def _post(self, path: str, data: bytes = b"") -> Any:
        request = urllib.request.Request(  # noqa: S310 - our own loopback server
            f"{self.url}{path}",
            data=data,
            method="POST",
            # Not urllib's default form type: moto reads the raw body (reset-auth's count).
            headers={"User-Agent": HARNESS_AGENT, "Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return json.loads(response.read() or b"{}")

    def reset(self) -> None:
        """Empty moto's backends, the fault rules and the counters; auth mode off."""
        self._post("/moto-api/reset-auth", b"inf")
        self._post("/moto-api/reset")
        self.faults.clear()

    async def areset(self) -> None:
        await trio.to_thread.run_sync(self.reset)

    @contextmanager
    def auth_mode(
        self, actions: Sequence[str], *, region: str = "us-east-1"
    ) -> Iterator[StaticKeys]:
        """Signatures verified and `actions` authorised from here on (see the module doc).

        Yields the keys of the IAM user allowed `actions` (e.g. "ec2:DescribeInstances").
        """
        import boto3

        # The user, its policy and its key: the three calls moto lets through unverified.
        self._post("/moto-api/reset-auth", b"3")
        try:
            iam = boto3.client(
                "iam",
                region_name=region,
                endpoint_url=self.url,
                aws_access_key_id=TEST_CREDENTIALS.access_key_id,
                aws_secret_access_key=TEST_CREDENTIALS.secret_access_key,
            )
            iam.create_user(UserName="trio-ccm")
            iam.put_user_policy(
                UserName="trio-ccm",
                PolicyName="trio-ccm",
                PolicyDocument=json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {"Effect": "Allow", "Action": list(actions), "Resource": "*"}
                        ],
                    }
                ),
            )
            key = iam.create_access_key(UserName="trio-ccm")["AccessKey"]
            yield StaticKeys(key["AccessKeyId"], key["SecretAccessKey"])
        finally:
            self._post("/moto-api/reset-auth", b"inf")


@asynccontextmanager
async def open_moto(*, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[MotoServer]:
    """A MotoServer started for the block (start and stop in a worker thread)."""
    server = MotoServer(host=host, port=port)
    await trio.to_thread.run_sync(server.start)
    try:
        yield server
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(_STOP_S + 1):
            await trio.to_thread.run_sync(server.stop, abandon_on_cancel=True)
