"""`serve()` in a program that configured no logging: trio-ccm's lines follow Python's library
convention (warnings and errors on stderr, one line each, a traceback once per failing
object, never local variables) instead of structlog's default, which prints every level and
each frame's locals."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A host program that configures nothing, embedding trio-ccm with a provider whose Node
# lookups and load balancers always fail, and which refuses one Service: two minutes of
# virtual time, so the Node is retried ~15 times and the Service ~5 times.
HOST = textwrap.dedent(
    """
    import trio, trio.testing
    from trio_ccm.cloud import ServiceRefused
    from trio_ccm.testing import ApiServer, make_service, register_node, run_ccm

    class Broken:
        async def instance_metadata(self, node):
            secret = "token-that-must-not-be-printed"
            raise RuntimeError("the cloud is down")
        async def instance_exists(self, node):
            return True
        async def instance_shutdown(self, node):
            return False

    class Balancers:
        async def get_load_balancer(self, cluster, service):
            return None
        def load_balancer_name(self, cluster, service):
            return service.name
        async def ensure_load_balancer(self, cluster, service, nodes):
            if service.name == "udp":
                raise ServiceRefused(f"Service {service.key}: UDP is not offered here")
            raise RuntimeError("the load balancer API is down")
        async def update_load_balancer(self, cluster, service, nodes):
            raise RuntimeError("the load balancer API is down")
        async def ensure_load_balancer_deleted(self, cluster, service):
            pass

    class Cloud:
        name = "broken"
        routes = None
        def __init__(self):
            self.instances = Broken()
            self.load_balancers = Balancers()
        async def initialize(self):
            pass

    async def main():
        api = ApiServer(seed=1)
        register_node(api, "node-1")
        api.create(make_service("web"))
        api.create(make_service("udp"))
        async with run_ccm(api, Cloud()):
            await trio.sleep(120)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    """
)


def test_a_failing_provider_under_serve_logs_a_bounded_number_of_lines() -> None:
    """With no logging configured, two minutes of a Node and a Service failing on every try
    and a refused Service print a few dozen warning lines: each failing object's traceback
    once, no local variables, nothing at info level."""
    done = subprocess.run(
        [sys.executable, "-c", HOST], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) < 80, done.stderr
    assert done.stderr.count("Traceback (most recent call last)") == 2
    assert "token-that-must-not-be-printed" not in done.stderr
    failed = [line for line in lines if line.startswith("actor.failed")]
    assert any("key=node-1" in line for line in failed)
    assert any("key=default/web" in line for line in failed)
    assert sum("default/udp" in line for line in lines) == 1  # the refusal, once
    assert not any(line.startswith(("ccm.started", "controller.started")) for line in lines)
