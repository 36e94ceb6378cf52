"""The test tooling's commands: `trio-ccm apiserver`, `trio-ccm testbed`, `trio-ccm demo`.

Registered in the `trio_ccm.commands` entry point group (testbed/pyproject.toml): the
runtime `trio-ccm` command loads one of these functions only when its command is asked for
(`trio_ccm.cli.main`), so the controller manager never loads the emulator or the simulated
cloud. Like `trio_ccm.cli`, this module owns process-wide effects (logging, signals, exit
codes) for its commands and nothing else; the plumbing is `trio_ccm.cli.process`.

    trio-ccm apiserver ...      the Kubernetes API emulator, standalone
    trio-ccm testbed ...        the emulator + the simulated cloud + simulated kubelets
    trio-ccm demo ...           testbed + the CCM in one process, with live progress

Both take `--cloud=aws`: moto in-process (the `aws-testbed` extra) instead of the simulated
cloud, with EC2 instances in a cluster-tagged VPC and kubelets naming their Nodes by
private DNS name, as on EC2; and `--cloud=openstack`: the real OpenStack test world
(`trio_ccm_testbed.openstack`, Debian's packages on loopback), with Nova servers (fake virt
driver) whose kubelets name their Nodes like the servers, and an OCCM-format cloud.conf.

Exit codes: 0 a clean stop (Ctrl-C, or the demo's --exit-when-done); 1 a runtime failure;
2 a rejected command line.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import math
import secrets
import shutil
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final

import prometheus_client
import structlog
import trio

from trio_ccm.base.govalues import parse_duration
from trio_ccm.cli.flags import parse_flags
from trio_ccm.cli.process import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    SIGNALS,
    Shutdown,
    aclose_provider,
    log_failures,
    usage_error,
    watch_signals,
)
from trio_ccm.cli.stalls import StallWatch
from trio_ccm.cloud.provider import CloudProvider
from trio_ccm.cloud.registry import load_provider
from trio_ccm.errors import ConfigError
from trio_ccm.kube.wellknown import CONTROLLER_ALIASES
from trio_ccm.logs import configure_logging
from trio_ccm.settings import FlagError, Settings
from trio_ccm.supervisor import Serving, serve
from trio_ccm_testbed.apiserver import ApiServer, serve_apiserver
from trio_ccm_testbed.cloud import SimCloud, cloud_config, serve_sim_cloud
from trio_ccm_testbed.cloud.dataplane import DataPlane
from trio_ccm_testbed.datapath import Pools, show_traffic, traffic_pools
from trio_ccm_testbed.loopback import random_loopback_network
from trio_ccm_testbed.testbed import NODE_LEASE_S, Census, Fleet, Testbed

if TYPE_CHECKING:
    from trio_ccm_testbed.aws import MotoServer
    from trio_ccm_testbed.openstack import OpenStackWorld

__all__ = ["run_apiserver", "run_demo", "run_testbed"]

_CLEANUP_S: Final = 5.0  # deadline of shielded cleanup at the end of the demo
_KUBECTL_TIMEOUT_S: Final = 20.0
AWS_CLUSTER_ID: Final = "kubernetes"
"""The cluster ID of `--cloud=aws` worlds (the Go CCM's default --cluster-name)."""
_CLOUD_NAMES: Final = {"sim": "sim cloud", "aws": "moto (EC2)", "openstack": "OpenStack"}
_NEEDS_MOTO: Final = (
    "--cloud=aws runs moto in-process, which is not installed: pip install 'trio-ccm[aws-testbed]'"
)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _duration(text: str) -> float:
    """A positive Go duration (`60s`, `1m30s`, `500ms`) or plain seconds, for argparse."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0s")
    return seconds


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port}: must be between 0 and 65535")
    return port


def _count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if count < 0:
        raise argparse.ArgumentTypeError(f"{count}: must be 0 or more")
    return count


def _quiet_logging(level: int) -> None:
    """Raise the level configure_logging set (the demo keeps its terminal for progress)."""
    logging.getLogger().setLevel(level)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))


async def _stop_at_first_signal(signals: AsyncIterator[int], nursery: trio.Nursery) -> None:
    """For the test-tooling subcommands: the first SIGTERM/SIGINT stops everything."""
    async for signum in signals:
        print(f"received {signal.Signals(signum).name}, stopping", flush=True)
        nursery.cancel_scope.cancel()
        break


# -- `trio-ccm apiserver` ------------------------------------------------------------------
def _apiserver_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-ccm apiserver",
        description="Run the Kubernetes API emulator standalone. It prints its URL, writes a "
        "kubeconfig that kubectl and the Python clients accept, and stops cleanly on Ctrl-C.",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (loopback only; default 127.0.0.1)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on; 0 picks a free one (default 0)"
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with a CA minted at start (its certificate goes into the kubeconfig)",
    )
    parser.add_argument(
        "--kubeconfig-out",
        metavar="PATH",
        help="write a kubeconfig for this server to PATH (mode 0600)",
    )
    parser.add_argument(
        "--rbac",
        metavar="FILE",
        nargs="+",
        action="extend",
        default=[],
        help="enforce RBAC, loading Roles, ClusterRoles, bindings and "
        "ServiceAccounts from these YAML files",
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        help="require bearer tokens; TOKEN is the admin (system:masters) token. "
        "With --rbac and no --token one is generated for the kubeconfig",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="seed for generated names, uids, IPs and fault dice"
    )
    return parser


def _fail(message: str) -> int:
    print(f"trio-ccm: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _load_rbac(server: ApiServer, files: Sequence[str]) -> str | None:
    """Load `--rbac` files into the emulator; the problem (naming the file), or None."""
    for name in files:
        try:
            text = Path(name).read_text()
        except OSError as exc:
            return f"--rbac {name}: cannot read the file: {exc.strerror}"
        try:
            server.load_manifest_text(text)
        except Exception as exc:  # any bad document: report it against its file
            message = getattr(exc, "message", None) or str(exc)
            return f"--rbac {name}: {message}"
    return None


def run_apiserver(argv: Sequence[str]) -> int:
    """`trio-ccm apiserver ARGS`: the Kubernetes API emulator, standalone, until a signal."""
    args = _apiserver_parser().parse_args(argv)
    if not _is_loopback(args.host):
        return _fail(
            f"--host {args.host}: the emulator listens on loopback only "
            "(use 127.0.0.1, ::1 or localhost)"
        )
    if not 0 <= args.port <= 65535:
        return _fail(f"--port {args.port}: must be between 0 and 65535")
    token = args.token
    if args.rbac and not token:
        token = secrets.token_urlsafe(24)
    server = ApiServer(admin_token=token, rbac=bool(args.rbac), seed=args.seed)
    problem = _load_rbac(server, args.rbac)
    if problem:
        return _fail(problem)

    async def run() -> int:
        with trio.open_signal_receiver(*SIGNALS) as signals:
            async with trio.open_nursery() as nursery:
                try:
                    listening = await nursery.start(
                        partial(
                            serve_apiserver, server, host=args.host, port=args.port, tls=args.tls
                        )
                    )
                except OSError as exc:
                    nursery.cancel_scope.cancel()
                    print(
                        f"trio-ccm: error: cannot listen on {args.host}:{args.port}: "
                        f"{exc.strerror}",
                        file=sys.stderr,
                    )
                    return EXIT_FAILURE
                print(f"trio-ccm apiserver listening on {listening.url}", flush=True)
                if args.kubeconfig_out:
                    written = listening.write_kubeconfig(args.kubeconfig_out, token)
                    print(f"kubeconfig written to {written}", flush=True)
                if args.rbac:
                    print("RBAC enforced from " + ", ".join(args.rbac), flush=True)
                await _stop_at_first_signal(signals, nursery)
        return EXIT_OK

    return trio.run(run, instruments=[StallWatch()])  # names a step that holds the loop


# -- `trio-ccm testbed` --------------------------------------------------------------------
def _testbed_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-ccm testbed",
        description="Run the Kubernetes API emulator and the simulated cloud on loopback, with "
        "N running instances whose simulated kubelets (as with --cloud-provider=external) "
        "register tainted Nodes and keep their Ready condition fresh. Instances added, "
        "stopped, started or terminated through the simulated cloud's admin API "
        "(/_sim/instances) are followed within a second. Point a CCM at the two files: "
        "trio-ccm --cloud-provider=sim --cloud-config=C --kubeconfig=K "
        "--cluster-cidr=10.244.0.0/16. Stops on Ctrl-C.",
    )
    parser.add_argument(
        "--nodes", type=_count, default=3, help="instances (and Nodes) at start (default 3)"
    )
    parser.add_argument(
        "--kubeconfig-out",
        metavar="PATH",
        required=True,
        help="write a kubeconfig for the emulator to PATH (mode 0600)",
    )
    parser.add_argument(
        "--cloud-config-out",
        metavar="PATH",
        required=True,
        help="write a cloud config for the CCM (--cloud-provider=sim, or aws with "
        "--cloud=aws) to PATH",
    )
    parser.add_argument(
        "--rbac",
        metavar="FILE",
        nargs="*",
        default=None,
        help="enforce RBAC (needs --tls: clients send no token over plain HTTP), loading "
        "Roles, ClusterRoles, bindings and ServiceAccounts from these YAML files, if any "
        "(or apply them later with the kubeconfig); the kubeconfig gets an admin token",
    )
    _add_listener_arguments(parser)
    _add_scale_arguments(parser)
    return parser


# -- testbed flags for a large world (issue 18; read with getattr in _open_world, since the
# demo's parser does not have them) --------------------------------------------------------
def _node_port_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        first = last = 0
    if not 1 <= first <= last <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: give FIRST-LAST ports, e.g. 30000-32767")
    return first, last


def _lb_network(text: str) -> str:
    try:
        network = ipaddress.IPv4Network(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: an IPv4 CIDR, e.g. 10.128.0.0/9") from exc
    return str(network)


def _add_scale_arguments(parser: argparse.ArgumentParser) -> None:
    scale = parser.add_argument_group("a large world")
    scale.add_argument(
        "--initialised",
        action="store_true",
        help="the --nodes register as a CCM leaves them in a running cluster (provider ID, "
        "topology labels, IPs, no uninitialized taint); instances added later join as new "
        "Nodes",
    )
    scale.add_argument(
        "--lb-network",
        type=_lb_network,
        default=None,
        metavar="CIDR",
        help="the pool load-balancer IPs come from (default 203.0.113.0/24: 253 load balancers, "
        "which carry no traffic); a loopback pool (e.g. 127.240.0.0/24) makes them serve "
        "traffic to the Nodes' NodePorts and simulated pods",
    )
    _add_traffic_arguments(scale)
    scale.add_argument(
        "--service-node-port-range",
        type=_node_port_range,
        default=None,
        metavar="FIRST-LAST",
        help="the emulator's NodePort range, as kube-apiserver's flag (default 30000-32767)",
    )
    scale.add_argument(
        "--no-node-leases",
        action="store_true",
        help="kubelets keep no node Lease (a Lease write every 10 s per Node is more than "
        "the emulator can take for 100,000 Nodes; a CCM does not read them)",
    )


def _add_traffic_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--node-network",
        type=_lb_network,
        default=None,
        metavar="CIDR",
        help="with a loopback --lb-network: the Nodes' internal IPs, each serving the "
        "Services' NodePorts (default: the /16 after the pool's, e.g. 127.241.0.0/16)",
    )
    group.add_argument(
        "--health-check-interval",
        type=_duration,
        default=2.0,
        metavar="DURATION",
        help="with a loopback --lb-network: how often each load balancer checks each of its "
        "Nodes (rise 2, fall 2; default 2s)",
    )
    group.add_argument(
        "--pods",
        type=_count,
        default=2,
        help="with a loopback --lb-network: simulated pods per Service (its annotation "
        "sim.trio-ccm.dev/replicas overrides; default 2)",
    )


def _add_listener_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cloud",
        choices=("sim", "aws", "openstack"),
        default="sim",
        help="the cloud: the simulated cloud (default), moto's EC2 on loopback for "
        "--cloud-provider=aws (needs the aws-testbed extra), or the real OpenStack test "
        "world for --cloud-provider=openstack (Debian 12's packages, installed when missing; "
        "ports from TRIO_CCM_OPENSTACK_PORT_BASE, see docs/openstack-testworld.md)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address both listen on (loopback only; default 127.0.0.1)",
    )
    parser.add_argument(
        "--port", type=_port, default=0, help="the emulator's port; 0 picks a free one (default 0)"
    )
    parser.add_argument(
        "--cloud-port",
        type=_port,
        default=0,
        help="the cloud's port (the simulated cloud, or moto); 0 picks a free one (default 0)",
    )
    parser.add_argument(
        "--tls", action="store_true", help="serve the emulator over HTTPS with a CA minted at start"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed for instance IDs, names and heartbeat offsets"
    )
    parser.add_argument(
        "--heartbeat",
        type=_duration,
        default=60.0,
        metavar="DURATION",
        help="how often each kubelet refreshes its Ready condition (default 60s)",
    )


@dataclass
class _World:
    """A testbed served over loopback: the emulator, the cloud and the kubelets."""

    testbed: Testbed
    api_url: str
    cloud_url: str
    kubeconfig: Path
    cloud: str
    """"sim", "aws" or "openstack"."""
    cloud_config: bytes
    """What the CCM's --cloud-config holds."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """What the CCM's environment needs besides (aws: moto's test keys, IMDS off)."""
    traffic: bool = False
    """Whether load balancers serve traffic (loopback pools, kube-proxy and pods)."""

    def provider(self, replica: str) -> CloudProvider:
        """The provider for a CCM in this process (`replica`: the sim cloud's call-log name)."""
        if self.cloud == "aws":
            from trio_ccm.cloud.aws import AwsProvider, parse_cloud_config

            config = parse_cloud_config(self.cloud_config, source="the testbed's cloud-config")
            return AwsProvider(config, environ=self.environ)
        if self.cloud == "openstack":
            return load_provider("openstack", self.cloud_config)
        return load_provider("sim", cloud_config(self.cloud_url, replica=replica))


async def _open_world(
    nursery: trio.Nursery,
    args: argparse.Namespace,
    *,
    nodes: int,
    kubeconfig: str,
    openstack: OpenStackWorld | None = None,
) -> _World:
    """Start the two listeners and the kubelets in `nursery`; write the kubeconfig. With
    --cloud=openstack, `openstack` is a world already started (else one is started here)."""
    rbac: list[str] | None = getattr(args, "rbac", None)
    token = secrets.token_urlsafe(24) if rbac is not None else None
    port_range = getattr(args, "service_node_port_range", None)
    api = ApiServer(
        admin_token=token,
        rbac=rbac is not None,
        seed=args.seed,
        **({"node_port_range": port_range} if port_range else {}),
    )
    problem = _load_rbac(api, rbac or [])
    if problem:
        raise ConfigError(problem)
    fleet: Fleet
    environ: Mapping[str, str] = {}
    pools: Pools = {}
    initialised = getattr(args, "initialised", False)
    lb_network = getattr(args, "lb_network", None)
    if args.cloud in ("aws", "openstack") and (initialised or lb_network):
        raise ConfigError(
            f"--initialised and --lb-network are for the simulated cloud, not --cloud={args.cloud}"
        )
    if args.cloud == "aws":
        fleet, cloud_url, config, environ = await _open_aws(nursery, args, nodes=nodes)
    elif args.cloud == "openstack":
        fleet, cloud_url, config = await _open_openstack(
            nursery, args, nodes=nodes, world=openstack
        )
    else:
        pools = _pools(args)
        cloud = fleet = SimCloud(seed=args.seed, **pools)
        cloud_listening = await nursery.start(
            partial(serve_sim_cloud, cloud, host=args.host, port=args.cloud_port)
        )
        cloud_url = cloud_listening.url
        config = cloud_config(cloud_url)
    traffic = args.cloud == "sim" and "internal_network" in pools
    testbed = Testbed(
        api,
        fleet,
        heartbeat_s=args.heartbeat,
        seed=args.seed,
        token=token,
        node_lease_s=None if getattr(args, "no_node_leases", False) else NODE_LEASE_S,
        pods=getattr(args, "pods", None) if traffic else None,
    )
    if traffic:
        assert isinstance(fleet, SimCloud)
        plane = DataPlane(fleet, health_interval_s=getattr(args, "health_check_interval", 2.0))
        await nursery.start(plane.serve)
    if args.cloud == "sim":
        testbed.add_nodes(nodes, initialised=initialised)
    api_listening = await nursery.start(
        partial(serve_apiserver, api, host=args.host, port=args.port, tls=args.tls)
    )
    written = api_listening.write_kubeconfig(kubeconfig, token)
    await nursery.start(testbed.serve)
    return _World(
        testbed,
        api_listening.url,
        cloud_url,
        written,
        args.cloud,
        config,
        dict(environ),
        traffic=traffic,
    )


def _pools(args: argparse.Namespace) -> Pools:
    """The simulated cloud's pools from --lb-network/--node-network (the demo: a random
    loopback /24 by default, so its load balancers carry traffic)."""
    lb_network = getattr(args, "lb_network", None)
    if lb_network is None and getattr(args, "loopback_by_default", False):
        lb_network = str(random_loopback_network())
    try:
        return traffic_pools(lb_network, getattr(args, "node_network", None))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


async def _open_aws(
    nursery: trio.Nursery, args: argparse.Namespace, *, nodes: int
) -> tuple[Fleet, str, bytes, Mapping[str, str]]:
    """moto on loopback with a cluster-tagged VPC and `nodes` running instances, followed
    by a `MotoFleet`; its URL, the cloud-config and the environment for the CCM."""
    try:
        from trio_ccm_testbed.aws import MotoFleet, World, open_moto
    except ImportError as exc:
        raise ConfigError(_NEEDS_MOTO) from exc

    async def serve_moto(*, task_status: trio.TaskStatus[MotoServer]) -> None:
        async with open_moto(host=args.host, port=args.cloud_port) as moto:
            task_status.started(moto)
            await trio.sleep_forever()

    try:
        moto: MotoServer = await nursery.start(serve_moto)
    except ImportError as exc:  # moto itself is imported when the server starts
        raise ConfigError(_NEEDS_MOTO) from exc
    world = await World.create(moto, cluster_id=AWS_CLUSTER_ID)
    await world.add_instances(nodes)
    fleet = MotoFleet(world)
    await nursery.start(fleet.serve)
    return fleet, moto.url, world.cloud_config(), world.environ()


async def _open_openstack(
    nursery: trio.Nursery,
    args: argparse.Namespace,
    *,
    nodes: int,
    world: OpenStackWorld | None = None,
) -> tuple[Fleet, str, bytes]:
    """The OpenStack test world (started in a worker thread, stopped when `nursery` ends;
    or `world`, started and stopped by the caller, as the tests' session world is)
    with `nodes` servers booted, followed by an `OpenStackFleet`; the Keystone URL the CCM
    uses and its OCCM-format cloud.conf (with [Route] router-id: the cluster router;
    [LoadBalancer] subnet-id and floating-network-id: the Nodes' subnet, the external
    network)."""
    from trio_ccm_testbed.openstack import Unavailable, open_free_world
    from trio_ccm_testbed.openstack.fleet import OpenStackFleet

    if args.cloud_port:
        raise ConfigError(
            "--cloud-port is not for --cloud=openstack: its ports come from "
            "TRIO_CCM_OPENSTACK_PORT_BASE (docs/openstack-testworld.md)"
        )

    async def serve_world(*, task_status: trio.TaskStatus[OpenStackWorld]) -> None:
        try:
            world = await trio.to_thread.run_sync(open_free_world)
        except Unavailable as exc:
            raise ConfigError(f"--cloud=openstack: {exc}") from exc
        try:
            task_status.started(world)
            await trio.sleep_forever()
        finally:
            # Shielded so Ctrl-C still stops every process it started; bounded by the
            # world's own grace periods (SIGKILL after 10 s per process group).
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(world.stop)

    if world is None:
        print("starting the OpenStack test world (about a minute)...", flush=True)
        world = await nursery.start(serve_world)
    assert world is not None
    print(
        f"OpenStack up in {world.timings_s['total']:.0f} s; clouds.yaml {world.clouds_yaml} "
        "(clouds ccm, admin: stop or delete servers with it)",
        flush=True,
    )
    fleet = OpenStackFleet(world)

    async def serve_fleet(*, task_status: trio.TaskStatus[None]) -> None:
        try:
            await fleet.serve(task_status=task_status)
        finally:
            fleet.close()  # its REST client's connections (unclosed sockets otherwise)

    try:
        await fleet.add_servers(nodes)
    except BaseException:
        fleet.close()
        raise
    await nursery.start(serve_fleet)
    path = world.write_cloud_conf(
        world.root / "cloud-testbed.conf",
        extra={
            "Route": {"router-id": world.router_id},
            "LoadBalancer": {
                "subnet-id": world.subnet_id,
                "floating-network-id": world.external_network_id,
            },
        },
    )
    return fleet, world.auth_url, path.read_bytes()


def _check_listener_args(args: argparse.Namespace, command: str) -> str | None:
    if not _is_loopback(args.host):
        return (
            f"--host {args.host}: the {command} listens on loopback only "
            "(use 127.0.0.1, ::1 or localhost)"
        )
    return None


def run_testbed(argv: Sequence[str]) -> int:
    """`trio-ccm testbed ARGS`: the emulator, a cloud and N simulated kubelets."""
    args = _testbed_parser().parse_args(argv)
    problem = _check_listener_args(args, "testbed")
    if problem:
        return usage_error(problem, command="testbed")
    configure_logging(verbosity=0, fmt="", stream=sys.stderr)

    async def run() -> int:
        with trio.open_signal_receiver(*SIGNALS) as signals:
            async with trio.open_nursery() as nursery:
                try:
                    world = await _open_world(
                        nursery, args, nodes=args.nodes, kubeconfig=args.kubeconfig_out
                    )
                    await trio.Path(args.cloud_config_out).write_bytes(world.cloud_config)
                except ConfigError as exc:
                    nursery.cancel_scope.cancel()
                    print(f"trio-ccm: error: {exc}", file=sys.stderr)
                    return EXIT_USAGE
                except OSError as exc:
                    nursery.cancel_scope.cancel()
                    print(f"trio-ccm: cannot start the testbed: {exc}", file=sys.stderr)
                    return EXIT_FAILURE
                # The world is built: keep its objects out of the collector's way. With
                # 100,000 stored Nodes a full collection walks millions of objects: steps of
                # seconds (trio.stall with gc_seconds) that held up every kubelet and answer.
                gc.freeze()
                print(f"apiserver listening on {world.api_url}", flush=True)
                cloud_name = _CLOUD_NAMES[world.cloud]
                print(f"{cloud_name} listening on {world.cloud_url}", flush=True)
                print(f"kubeconfig written to {world.kubeconfig}", flush=True)
                print(
                    f"cloud config for --cloud-provider={world.cloud} written to "
                    f"{args.cloud_config_out}",
                    flush=True,
                )
                if world.environ:
                    exports = " ".join(f"{k}={v}" for k, v in world.environ.items())
                    print(f"the CCM's environment: export {exports}", flush=True)
                print(
                    f"{args.nodes} nodes registered (heartbeat every {args.heartbeat:g}s); "
                    "Ctrl-C to stop",
                    flush=True,
                )
                await _stop_at_first_signal(signals, nursery)
        return EXIT_OK

    stalls = StallWatch()  # names a step that holds the loop (and its share of collections)
    stalls.track_gc()
    try:
        return trio.run(run, instruments=[stalls])
    finally:
        stalls.untrack_gc()


# -- `trio-ccm demo` -----------------------------------------------------------------------
def _demo_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-ccm demo",
        usage="trio-ccm demo [options] [-- CCM flags]",
        description="Run a testbed (emulator, simulated cloud or moto with --cloud=aws, N "
        "kubelets) and the CCM (--cloud-provider=sim or aws, leader election on) in one "
        "process, over loopback. Prints "
        "progress about once a second and a summary at the end; the kubeconfig lets kubectl "
        "watch meanwhile. Flags after `--` go to the CCM (e.g. -- --kube-api-qps=100). "
        "Stops cleanly on Ctrl-C.",
    )
    parser.add_argument(
        "--nodes", type=_count, default=50, help="instances (and Nodes) at start (default 50)"
    )
    parser.add_argument(
        "--services",
        type=_count,
        default=None,
        help="Services of type LoadBalancer created once the CCM runs (default 3, or 0 when "
        "the provider has no load balancers)",
    )
    parser.add_argument(
        "--kubeconfig-out",
        metavar="PATH",
        default="trio-ccm-demo.kubeconfig",
        help="kubeconfig for kubectl while the demo runs; removed at exit "
        "(default trio-ccm-demo.kubeconfig)",
    )
    parser.add_argument(
        "--exit-when-done",
        action="store_true",
        help="once every Node is initialised and every LoadBalancer Service has an "
        "EXTERNAL-IP: print the summary, show `kubectl get nodes -o wide` and `kubectl get "
        "svc` (when kubectl is installed) and exit",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show the CCM's info log lines on stderr (default: warnings only)",
    )
    _add_listener_arguments(parser)
    traffic = parser.add_argument_group("traffic")
    traffic.add_argument(
        "--lb-network",
        type=_lb_network,
        default=None,
        metavar="CIDR",
        help="the pool load-balancer IPs come from (default: a random 127.x.y.0/24, so the "
        "EXTERNAL-IPs answer on this machine); a pool outside 127.0.0.0/8 carries no traffic",
    )
    _add_traffic_arguments(traffic)
    parser.set_defaults(loopback_by_default=True)
    return parser


@dataclass
class _Progress:
    """What the demo has seen, for the progress lines and the summary."""

    started_at: float
    census: Census | None = None
    done_at: float | None = None
    kube_requests: Counter[str] = field(default_factory=Counter)
    done: trio.Event = field(default_factory=trio.Event)


_WRITE_METHODS: Final = ("POST", "PUT", "PATCH", "DELETE")


def _kube_requests(registry: prometheus_client.CollectorRegistry) -> Counter[str]:
    """The CCM's API requests by HTTP method, from client-go's `rest_client_requests_total`."""
    counts: Counter[str] = Counter()
    for metric in registry.collect():
        if metric.name != "rest_client_requests":
            continue
        for sample in metric.samples:
            if sample.name == "rest_client_requests_total":
                counts[sample.labels["method"]] += int(sample.value)
    return counts


def _progress_line(progress: _Progress, now: float) -> str:
    census = progress.census
    assert census is not None
    writes = sum(progress.kube_requests[m] for m in _WRITE_METHODS)
    return (
        f"[{now - progress.started_at:6.1f}s] nodes initialised {census.initialised}/"
        f"{census.nodes}  routes {census.routes}  "
        f"load balancers {len(census.external_ips)}/{census.load_balancers}  "
        f"cloud calls {sum(census.cloud_calls.values())}  "
        f"kube writes {writes}  events {census.event_count}"
    )


def _summary(progress: _Progress) -> str:
    census = progress.census
    if census is None:
        return "trio-ccm demo: stopped before the first count"
    rows: list[tuple[str, str]] = [("nodes", str(census.nodes))]
    zones = ", ".join(f"{zone} {n}" for zone, n in sorted(census.zones.items()))
    rows.append(("initialised", f"{census.initialised}" + (f"  ({zones})" if zones else "")))
    took = (
        f"{progress.done_at - progress.started_at:.2f} s after the CCM started"
        if progress.done_at is not None
        else "not all done"
    )
    rows.append(("pod CIDRs", f"{census.pod_cidrs} Nodes"))
    rows.append(("routes", str(census.routes)))
    rows.append(("load balancers", f"{len(census.external_ips)}/{census.load_balancers}"))
    rows += [(f"  {key}", ip) for key, ip in sorted(census.external_ips.items())]
    rows.append(("time to finish all", took))
    rows.append(("cloud calls", str(sum(census.cloud_calls.values()))))
    rows += [(f"  {m}", str(n)) for m, n in sorted(census.cloud_calls.items())]
    writes = sum(progress.kube_requests[m] for m in _WRITE_METHODS)
    total = sum(progress.kube_requests.values())
    rows.append(("kube API requests by the CCM", f"{total}  ({writes} writes)"))
    rows += [(f"  {m}", str(n)) for m, n in sorted(progress.kube_requests.items())]
    objects = sum(census.events.values())
    repeats = census.event_count - objects
    rows.append(("Events", f"{objects}" + (f"  (+{repeats} repeats)" if repeats else "")))
    rows += [(f"  {reason}", str(n)) for reason, n in sorted(census.events.items())]
    width = max(len(label) for label, _ in rows) + 2
    lines = ["", "trio-ccm demo summary", "-" * (width + 24)]
    lines += [f"{label:<{width}}{value}" for label, value in rows]
    return "\n".join(lines)


async def _track(
    testbed: Testbed,
    registry: prometheus_client.CollectorRegistry,
    progress: _Progress,
    *,
    expect: int,
    services: int = 0,
) -> None:
    """Count every 0.2 s; print a progress line at most once a second when a count changed,
    and set `progress.done` once `expect` Nodes (or more) exist and all are initialised."""
    shown: tuple[int, ...] = ()
    last_print = -math.inf
    while True:
        census = progress.census = await testbed.census()
        progress.kube_requests = _kube_requests(registry)
        now = trio.current_time()
        counts = (
            census.nodes,
            census.initialised,
            len(census.external_ips),
            census.routes,
            sum(census.cloud_calls.values()),
            census.event_count,
        )  # not the kube requests: Lease renewals alone would print a line every 2 s
        complete = (
            census.nodes >= expect
            and census.initialised == census.nodes
            and census.routes >= census.nodes
            and census.load_balancers >= services
            and len(census.external_ips) == census.load_balancers
        )
        if complete and not progress.done.is_set():
            progress.done_at = now
            progress.done.set()
            print(_progress_line(progress, now), flush=True)
            print(
                f"all {census.nodes} Nodes initialised and routed, {census.load_balancers} "
                f"load balancers ready in {now - progress.started_at:.2f} s",
                flush=True,
            )
            shown, last_print = counts, now
        elif counts != shown and now - last_print >= 1.0:
            print(_progress_line(progress, now), flush=True)
            shown, last_print = counts, now
        await trio.sleep(0.2)


async def _kubectl(kubeconfig: Path, *what: str) -> str | None:
    """`kubectl get WHAT` against the demo, or None without kubectl."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    with trio.move_on_after(_KUBECTL_TIMEOUT_S):
        result = await trio.run_process(
            [kubectl, "--kubeconfig", str(kubeconfig), "get", *what],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        output = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
        return output.rstrip("\n")
    return f"(kubectl did not answer within {_KUBECTL_TIMEOUT_S:g} s)"


def run_demo(argv: Sequence[str]) -> int:
    """`trio-ccm demo ARGS [-- CCM FLAGS]`: a testbed and the CCM in one process."""
    own, ccm_flags = _split_at_dashes(argv)
    args = _demo_parser().parse_args(own)
    problem = _check_listener_args(args, "demo")
    if problem:
        return usage_error(problem, command="demo")
    kubeconfig = Path(args.kubeconfig_out)
    try:
        settings = _demo_settings(args, ccm_flags)
    except FlagError as exc:
        return usage_error(f"CCM flags after --: {exc}", command="demo")
    configure_logging(verbosity=settings.verbosity, fmt=settings.logging_format, stream=sys.stderr)
    if not args.verbose and not settings.verbosity:
        _quiet_logging(logging.WARNING)
    registry = prometheus_client.CollectorRegistry()
    shutdown = Shutdown()
    failed: list[int] = []  # set when the listeners could not start

    async def run() -> None:
        with trio.open_signal_receiver(*SIGNALS) as signals:
            async with trio.open_nursery() as world_nursery:
                try:
                    world = await _open_world(
                        world_nursery, args, nodes=args.nodes, kubeconfig=str(kubeconfig)
                    )
                except ConfigError as exc:
                    print(f"trio-ccm: error: {exc}", file=sys.stderr)
                    failed.append(EXIT_USAGE)
                    world_nursery.cancel_scope.cancel()
                    return
                except OSError as exc:
                    print(f"trio-ccm: the demo could not start: {exc}", file=sys.stderr)
                    failed.append(EXIT_FAILURE)
                    world_nursery.cancel_scope.cancel()
                    return
                provider = world.provider("trio-ccm-demo")
                if args.services is None:
                    args.services = 3 if provider.load_balancers is not None else 0
                elif args.services and provider.load_balancers is None:
                    await aclose_provider(provider)
                    print(
                        f"trio-ccm: error: --services={args.services}: the {world.cloud} "
                        "provider has no load balancers yet; use --services=0",
                        file=sys.stderr,
                    )
                    failed.append(EXIT_USAGE)
                    world_nursery.cancel_scope.cancel()
                    return
                cloud_name = _CLOUD_NAMES[world.cloud]
                print(f"apiserver  {world.api_url}", flush=True)
                print(f"{cloud_name:<10} {world.cloud_url}", flush=True)
                print(f"{args.nodes} Nodes registered by simulated kubelets; starting the CCM")
                print(f"watch it:  kubectl --kubeconfig {kubeconfig} get nodes -o wide", flush=True)
                if not args.exit_when_done and world.cloud == "sim":
                    print(
                        "add nodes: curl -s -X POST "
                        f'{world.cloud_url}/_sim/instances -d \'{{"name": "node-extra-1"}}\'',
                        flush=True,
                    )
                try:
                    progress = await _demo_ccm(
                        settings, provider, world, registry, signals, shutdown, args
                    )
                finally:
                    await aclose_provider(provider)
                print(_summary(progress), flush=True)
                if args.exit_when_done and progress.done.is_set() and not shutdown.signals:
                    for what in (("nodes", "-o", "wide"), ("svc", "-A")):
                        shown = await _kubectl(world.kubeconfig, *what)
                        if shown is not None:
                            print(f"\n$ kubectl --kubeconfig {kubeconfig} get {' '.join(what)}")
                            print(shown, flush=True)
                world_nursery.cancel_scope.cancel()

    code = EXIT_OK
    try:
        trio.run(run)
    except* Exception as group:
        log_failures(group)
        code = EXIT_FAILURE
    finally:
        kubeconfig.unlink(missing_ok=True)
    if code == EXIT_OK and failed:
        code = failed[0]
    elif code == EXIT_OK and shutdown.forced:
        code = EXIT_FAILURE
    return code


def _demo_settings(args: argparse.Namespace, ccm_flags: Sequence[str]) -> Settings:
    """The demo CCM's settings: its cloud, the demo's kubeconfig, then `ccm_flags`."""
    return parse_flags(
        [
            f"--cloud-provider={args.cloud}",
            f"--kubeconfig={args.kubeconfig_out}",
            "--secure-port=0",
            # Pod CIDRs by the node-ipam-controller, cloud routes for them.
            "--cluster-cidr=10.244.0.0/16",
            "--allocate-node-cidrs",
            *ccm_flags,
        ],
        controller_aliases=CONTROLLER_ALIASES,
    )


async def _demo_ccm(
    settings: Settings,
    provider: CloudProvider,
    world: _World,
    registry: prometheus_client.CollectorRegistry,
    signals: AsyncIterator[int],
    shutdown: Shutdown,
    args: argparse.Namespace,
) -> _Progress:
    """Run the CCM until every Node is initialised (with --exit-when-done) or a signal."""
    progress = _Progress(started_at=trio.current_time())
    async with trio.open_nursery() as nursery:
        holder: list[Serving] = []

        async def replica(*, task_status: trio.TaskStatus[Serving]) -> None:
            await serve(settings, provider, registry=registry, task_status=task_status)
            nursery.cancel_scope.cancel()  # returned after shut_down(): the demo is over

        async def finish_when_done() -> None:
            await progress.done.wait()
            if world.traffic:
                await _show_traffic(world)
            elif progress.census is not None and progress.census.external_ips:
                print("\n".join(["", *_no_traffic(world, progress.census.external_ips)]))
            if args.exit_when_done:
                holder[0].shut_down()

        nursery.start_soon(
            partial(
                watch_signals,
                signals,
                shutdown,
                lambda: holder[0] if holder else None,
                nursery.cancel_scope,
                announce=partial(print, flush=True),
            )
        )
        holder.append(await nursery.start(replica))
        progress.started_at = trio.current_time()
        await world.testbed.add_load_balancer_services(args.services)
        nursery.start_soon(
            partial(
                _track,
                world.testbed,
                registry,
                progress,
                expect=args.nodes,
                services=args.services,
            )
        )
        nursery.start_soon(finish_when_done)
    # One last count, so the summary shows the final state.
    with trio.move_on_after(_CLEANUP_S):
        progress.census = await world.testbed.census()
        progress.kube_requests = _kube_requests(registry)
    return progress


async def _show_traffic(world: _World) -> None:
    """Requests through every EXTERNAL-IP, and the curl to type while the demo runs."""
    cloud = world.testbed.cloud
    assert isinstance(cloud, SimCloud)
    lines = await show_traffic(world.testbed, cloud)
    print("\n".join(["", *lines]), flush=True)
    if len(lines) > 1:
        census = await world.testbed.census()
        first = next(iter(sorted(census.external_ips.values())), "")
        if first:
            print(f"try it:  curl http://{first}/   (while the demo runs)", flush=True)


def _no_traffic(world: _World, external_ips: Mapping[str, str]) -> list[str]:
    """Why the demo sends no request through the EXTERNAL-IPs of a cloud without its data
    path (aws, openstack): an address outside loopback is never sent to, whatever answers
    there; one on loopback has nothing behind it (moto's ELBs and Octavia's noop amphora
    driver balance nothing)."""
    lines = [f"traffic: none sent through the {_CLOUD_NAMES[world.cloud]} load balancers"]
    for key, address in sorted(external_ips.items()):
        reason = (
            "on loopback, but this cloud's load balancers forward nothing"
            if _is_loopback(address)
            else "not in 127.0.0.0/8: the demo sends traffic to loopback only"
        )
        lines.append(f"  {key}  {address}: {reason}")
    return lines


def _split_at_dashes(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    args = list(argv)
    if "--" in args:
        at = args.index("--")
        return args[:at], args[at + 1 :]
    return args, []
