"""The `trio-ccm` command. The only module with process-wide effects (signals, exit codes).

Subcommands:
  apiserver   run the Kubernetes API emulator standalone (trio_ccm.testing.apiserver)
"""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from trio_ccm._version import __version__


def _apiserver_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "apiserver",
        help="run the Kubernetes API emulator on loopback",
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-ccm",
        description="trio-ccm: a Kubernetes cloud-controller-manager on Trio.",
    )
    parser.add_argument("--version", action="version", version=f"trio-ccm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _apiserver_parser(sub)
    return parser


def _fail(message: str) -> int:
    print(f"trio-ccm: error: {message}", file=sys.stderr)
    return 2


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_apiserver(args: argparse.Namespace) -> int:
    from trio_ccm.testing.apiserver import ApiServer, serve_apiserver

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
    for name in args.rbac:
        path = Path(name)
        try:
            text = path.read_text()
        except OSError as exc:
            return _fail(f"--rbac {name}: cannot read the file: {exc.strerror}")
        try:
            server.load_manifest_text(text)
        except Exception as exc:
            message = getattr(exc, "message", None) or str(exc)
            return _fail(f"--rbac {name}: {message}")

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                try:
                    listening = await nursery.start(
                        lambda task_status: serve_apiserver(
                            server,
                            host=args.host,
                            port=args.port,
                            tls=args.tls,
                            task_status=task_status,
                        )
                    )
                except OSError as exc:
                    raise SystemExit(
                        _fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror}")
                    ) from exc
                print(f"trio-ccm apiserver listening on {listening.url}", flush=True)
                if args.kubeconfig_out:
                    written = listening.write_kubeconfig(args.kubeconfig_out, token)
                    print(f"kubeconfig written to {written}", flush=True)
                if args.rbac:
                    print("RBAC enforced from " + ", ".join(args.rbac), flush=True)
                async for signum in signals:
                    print(f"received {signal.Signals(signum).name}, stopping", flush=True)
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "apiserver":
        return run_apiserver(args)
    parser.print_help(sys.stderr)
    print(
        "\ntrio-ccm: the controller manager itself arrives with the controller issues; "
        "for now the available command is 'apiserver'.",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
