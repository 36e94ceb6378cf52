"""Installing what the world runs: Debian 12's OpenStack (Zed) packages, with apt.

`ensure_installed()` returns at once when every package is there. Otherwise, as root on
Debian, it runs `apt-get update` and one `apt-get install` with nothing started meanwhile:
a `/usr/sbin/policy-rc.d` that exits 101 (removed afterwards, unless it was there before)
keeps the packages' init scripts from starting services, and debconf answers turn off
dbconfig and endpoint registration. Where that cannot happen (not root, not Debian, no
apt), it raises `Unavailable` with one line saying why and what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["PACKAGES", "Unavailable", "ensure_installed", "missing_packages"]

PACKAGES: Final = (
    "mariadb-server",
    "rabbitmq-server",
    "keystone",
    "glance-api",
    "placement-api",
    "nova-api",
    "nova-conductor",
    "nova-scheduler",
    "neutron-server",
    "octavia-api",
    "octavia-worker",
    "uwsgi-plugin-python3",
)
"""Debian packages the world runs (nova-compute is left out: it pulls qemu and libvirt;
the world runs its code, from nova-api's dependencies, with the fake driver)."""

_POLICY_RC: Final = Path("/usr/sbin/policy-rc.d")
_POLICY_RC_TEXT: Final = (
    "#!/bin/sh\n# trio-ccm: no service starts while packages install\nexit 101\n"
)
_DEBCONF: Final = "".join(
    f"{package} {key} boolean false\n"
    for package, key in (
        ("keystone", "keystone/dbconfig-install"),
        ("keystone", "keystone/create-admin-tenant"),
        ("keystone", "keystone/register-endpoint"),
        ("glance-common", "glance/dbconfig-install"),
        ("glance-api", "glance/register-endpoint"),
        ("nova-common", "nova/dbconfig-install"),
        ("nova-api", "nova/register-endpoint"),
        ("placement-common", "placement/dbconfig-install"),
        ("placement-api", "placement/register-endpoint"),
        ("neutron-common", "neutron/dbconfig-install"),
        ("neutron-api", "neutron/register-endpoint"),
        ("octavia-common", "octavia/dbconfig-install"),
        ("octavia-api", "octavia/register-endpoint"),
    )
)
_HINT: Final = "apt-get install " + " ".join(PACKAGES)


class Unavailable(Exception):  # noqa: N818 - a reason to skip, not a failure of ours
    """The world cannot run on this machine; the message says why and what to install."""


def missing_packages(packages: Sequence[str] = PACKAGES) -> list[str]:
    """The packages of `packages` that dpkg does not list as installed."""
    if shutil.which("dpkg-query") is None:
        return list(packages)
    found = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *packages],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = {
        line.split()[0] for line in found.stdout.splitlines() if line.endswith(" installed")
    }
    return [package for package in packages if package not in installed]


def _debian_12() -> bool:
    try:
        release = Path("/etc/os-release").read_text()
    except OSError:
        return False
    return "ID=debian" in release and 'VERSION_ID="12"' in release


def ensure_installed(log_path: Path, *, packages: Sequence[str] = PACKAGES) -> list[str]:
    """Install the missing `packages` (module docstring); the ones installed, in order.
    apt's output goes to `log_path`. Raises `Unavailable` where it cannot install."""
    missing = missing_packages(packages)
    if not missing:
        return []
    if not _debian_12():
        raise Unavailable(f"the OpenStack test world needs Debian 12's packages: {_HINT}")
    if os.geteuid() != 0:
        raise Unavailable(
            f"{len(missing)} OpenStack packages are missing and installing needs root: {_HINT}"
        )
    if shutil.which("apt-get") is None or shutil.which("debconf-set-selections") is None:
        raise Unavailable(f"apt-get is not available to install the packages: {_HINT}")
    environ = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    own_policy = not _POLICY_RC.exists()
    if own_policy:
        _POLICY_RC.write_text(_POLICY_RC_TEXT)
        _POLICY_RC.chmod(0o755)
    try:
        with log_path.open("ab") as log:
            subprocess.run(
                ["debconf-set-selections"],
                input=_DEBCONF.encode(),
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
            )
            for argv in (
                ["apt-get", "update", "-q"],
                [
                    "apt-get",
                    "install",
                    "-y",
                    "-q",
                    "--no-install-recommends",
                    "-o",
                    "Dpkg::Options::=--force-confdef",
                    "-o",
                    "Dpkg::Options::=--force-confold",
                    *missing,
                ],
            ):
                done = subprocess.run(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=environ, check=False
                )
                if done.returncode != 0:
                    raise RuntimeError(
                        f"{' '.join(argv[:2])} exited {done.returncode}: see {log_path}"
                    )
    finally:
        if own_policy:
            _POLICY_RC.unlink(missing_ok=True)
    return missing
