"""A client-go exec credential plugin for tests, run as `python exec_plugin.py [options]`.

It prints an ExecCredential (or, on request, junk or a failure), counts its runs in a file and
records what it was given (KUBERNETES_EXEC_INFO, chosen environment variables, stdin).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-version", default="client.authentication.k8s.io/v1")
    parser.add_argument("--kind", default="ExecCredential")
    parser.add_argument("--token", help="token to print; with --count, '-<run number>' is added")
    parser.add_argument("--cert", type=Path, help="file whose PEM goes to clientCertificateData")
    parser.add_argument("--key", type=Path, help="file whose PEM goes to clientKeyData")
    parser.add_argument("--expires-in", type=float, help="seconds until expirationTimestamp")
    parser.add_argument("--count", type=Path, help="append one line per run to this file")
    parser.add_argument("--record", type=Path, help="write what the plugin saw to this file")
    parser.add_argument("--echo-env", action="append", default=[], help="env names to record")
    parser.add_argument("--exit", type=int, default=0, help="exit with this status")
    parser.add_argument("--stderr", default="", help="print this to stderr")
    parser.add_argument("--stdout", help="print this instead of an ExecCredential")
    options = parser.parse_args()

    run = 0
    if options.count is not None:
        with options.count.open("a") as handle:
            handle.write("run\n")
        run = len(options.count.read_text().splitlines())
    if options.record is not None:
        seen = {
            "info": json.loads(os.environ.get("KUBERNETES_EXEC_INFO", "null")),
            "env": {name: os.environ.get(name) for name in options.echo_env},
            "stdin": sys.stdin.read() if sys.stdin is not None else None,
        }
        options.record.write_text(json.dumps(seen))
    if options.stderr:
        sys.stderr.write(options.stderr + "\n")
    if options.exit:
        return int(options.exit)
    if options.stdout is not None:
        sys.stdout.write(options.stdout)
        return 0

    status: dict[str, str] = {}
    if options.token is not None:
        status["token"] = f"{options.token}-{run}" if options.count is not None else options.token
    if options.cert is not None:
        status["clientCertificateData"] = options.cert.read_text()
    if options.key is not None:
        status["clientKeyData"] = options.key.read_text()
    if options.expires_in is not None:
        now = datetime.datetime.now(datetime.UTC)
        expiry = now + datetime.timedelta(seconds=options.expires_in)
        status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
    credential = {"apiVersion": options.api_version, "kind": options.kind, "status": status}
    sys.stdout.write(json.dumps(credential))
    return 0


if __name__ == "__main__":
    sys.exit(main())
