"""`python -m trio_ccm.testing.openstack up|down|status`: the test world by hand.

- `up`: start the world (ports from `TRIO_CCM_OPENSTACK_PORT_*`, folder from
  `TRIO_CCM_OPENSTACK_DIR`), print where clouds.yaml and cloud.conf are, and serve the fault
  proxy in the foreground until Ctrl-C or SIGTERM, then stop everything;
- `down`: stop what a world in that folder left running (a killed `up`);
- `status`: the world's running process groups, their RSS and listening sockets.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType

from trio_ccm.testing.openstack.install import Unavailable
from trio_ccm.testing.openstack.layout import Ports
from trio_ccm.testing.openstack.world import OpenStackWorld, default_root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trio_ccm.testing.openstack")
    parser.add_argument("command", choices=("up", "down", "status"))
    args = parser.parse_args(argv)
    ports = Ports.from_environ()
    world = OpenStackWorld(default_root(ports), ports)
    if args.command == "down":
        stopped = world.stop_leftovers()
        print(f"stopped {', '.join(stopped) or 'nothing'} in {world.root}")
        return 0
    if args.command == "status":
        report = world.status()
        total = sum(item["rss_mb"] for item in report.values())
        print(json.dumps({"root": str(world.root), "rss_mb": total, "processes": report}, indent=1))
        return 0 if report else 1
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        world.start()
    except Unavailable as exc:
        print(f"cannot start the OpenStack test world: {exc}", file=sys.stderr)
        return 2
    try:
        print(
            f"OpenStack test world up in {world.timings_s['total']} s "
            f"({'from the saved dump' if world.from_dump else 'db syncs'}): {world.timings_s}\n"
            f"auth_url   {world.auth_url} (through the fault proxy)\n"
            f"clouds.yaml {world.clouds_yaml} (clouds: ccm, admin)\n"
            f"cloud.conf  {world.cloud_conf}\n"
            "Ctrl-C stops it.",
            flush=True,
        )
        done.wait()
    finally:
        world.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
