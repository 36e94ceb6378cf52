"""The world's processes: each in its own session (its PID is its process group's ID), with a
PID file, stopped as a group, and its listening sockets checked to be on loopback.

A PID file holds the PID and the process's start time (in clock ticks since boot, from
`/proc/<pid>/stat`), so a PID file left by a crashed run is acted on only while that PID
still names the same process (a recycled PID is left alone). Each process's environment also
carries `TRIO_CCM_OPENSTACK_WORLD=<world folder>`, to tell the world's processes apart in
`ps e` (some services rewrite their title over it, so it is not relied on).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "MARKER",
    "Process",
    "group_members",
    "group_rss_bytes",
    "listening_addresses",
    "stop_group",
]

MARKER: Final = "TRIO_CCM_OPENSTACK_WORLD"
_PAGE: Final = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Process:
    """One started process group: `name`, its PID (= PGID), its log."""

    name: str
    pid: int
    log: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        run: Path,
        logs: Path,
        environ: Mapping[str, str],
    ) -> Process:
        """Start `argv` in its own session, output to `logs/<name>.log`, PID file in `run`."""
        log_path = logs / f"{name}.log"
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(environ),
                start_new_session=True,
                close_fds=True,
            )
        (run / f"{name}.pid").write_text(f"{popen.pid} {start_time(popen.pid)}\n")
        return cls(name, popen.pid, log_path, popen)

    def alive(self) -> bool:
        """The process itself still runs (a zombie of ours is reaped, and not alive)."""
        if self.popen is not None:
            return self.popen.poll() is None
        return _running(self.pid)

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, grace_s: float) -> bool:
        """SIGTERM to the group, SIGKILL after `grace_s`; True if it had to be killed."""
        return stop_group(self.pid, grace_s=grace_s, reap=self.popen)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system, with those of reaped children) of the processes whose
    process group is `pgid`."""
    ticks = 0
    for pid in group_members(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def group_members(pgid: int) -> list[int]:
    """The PIDs whose process group is `pgid` (zombies excluded)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def stop_group(pgid: int, *, grace_s: float, reap: subprocess.Popen[bytes] | None = None) -> bool:
    """SIGTERM to process group `pgid`, SIGKILL to what is left after `grace_s`; True if
    SIGKILL was needed. `reap`: the leader, if it is our child, waited for."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    killed = False
    while group_members(pgid):
        if reap is not None:
            reap.poll()
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            killed = True
            deadline = time.monotonic() + 10.0
        time.sleep(0.05)
    if reap is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            reap.wait(timeout=5.0)
    return killed


def start_time(pid: int) -> int:
    """When process `pid` started, in clock ticks since boot (-1 if it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


def read_pid_file(path: Path) -> int | None:
    """The PID of a PID file written by `Process.start`, if that process still runs (same
    PID and start time); else None."""
    try:
        pid_text, started = path.read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    return pid if _running(pid) and str(start_time(pid)) == started else None


def group_rss_bytes(pgid: int) -> int:
    total = 0
    for pid in group_members(pgid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    return total


def _socket_inodes(pids: Iterable[int]) -> set[int]:
    inodes: set[int] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        with contextlib.suppress(OSError):
            for fd in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(int(target[8:-1]))
    return inodes


def _decode(hex_address: str) -> tuple[str, int]:
    address, port = hex_address.split(":")
    raw = bytes.fromhex(address)
    # /proc/net/tcp{,6} print each 32-bit word of the address in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words)), int(port, 16)


def listening_addresses(pgid: int) -> list[tuple[str, int]]:
    """The (address, port) of every TCP socket process group `pgid` listens on."""
    inodes = _socket_inodes(group_members(pgid))
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                columns = line.split()
                if columns[3] == "0A" and int(columns[9]) in inodes:  # 0A: LISTEN
                    found.append(_decode(columns[1]))
    return found
