"""`OpenStackWorld`: the real OpenStack control plane of the tests, started and stopped here.

`OpenStackWorld(root, ports=...)`'s `start()`:

1. installs the Debian packages when missing (`install.py`; `Unavailable` where it cannot);
2. stops what a crashed run of the same world folder left running, checks that every port
   is free, writes the configuration, the plugins (on the services' `PYTHONPATH`, with a
   dist-info folder for their entry points), fernet and credential keys, Octavia's CA;
3. starts MariaDB (a fresh datadir), epmd and RabbitMQ (every Erlang listener on the
   world's host), and fills the databases: from the saved dump when there is one for these
   package versions (the cell mappings are then set to this world's ports), else by the
   services' own db syncs;
4. starts Keystone and creates the projects, users, roles and catalog, then saves the dump
   for the next start (from a dump: only sets the catalog to this world's ports); starts
   Placement,
   Glance, Neutron, Nova (api, conductor, scheduler, and compute with the fake driver) and
   Octavia (api, worker), waits until each answers, and checks that every socket each
   process group listens on is on the world's host;
5. waits for the compute host, creates networks, router, flavors, image and zone
   (`bootstrap.py`), starts the fault proxy, writes `clouds.yaml` and `cloud.conf`.

Each process runs in its own session, from Debian's `/usr/bin/python3` (never the venv's),
with a PID file in `run/`; `stop()` sends SIGTERM to each process group, in the reverse
order, and SIGKILL to what is left after a grace period (octavia-worker ignores SIGTERM).
Nothing else is touched. The world folder is locked while a world runs in it.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import gzip
import hashlib
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import httpx
import structlog
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from trio_ccm_testbed.openstack import bootstrap
from trio_ccm_testbed.openstack.configs import write_configs
from trio_ccm_testbed.openstack.install import PACKAGES, Unavailable, ensure_installed
from trio_ccm_testbed.openstack.layout import Layout, Ports, cache_dir, is_loopback
from trio_ccm_testbed.openstack.processes import (
    MARKER,
    Process,
    group_cpu_s,
    group_rss_bytes,
    listening_addresses,
    read_pid_file,
    stop_group,
)
from trio_ccm_testbed.openstack.proxy import Faults, ProxyThread
from trio_ccm_testbed.openstack.rest import Rest

if TYPE_CHECKING:
    import openstack.connection

__all__ = ["OpenStackWorld", "WorldBusyError", "default_root", "open_free_world", "unique"]

log = structlog.get_logger("trio_ccm_testbed.openstack")

SYSTEM_PYTHON: Final = "/usr/bin/python3"
DUMP_FORMAT: Final = "2"  # bump when what the dump holds changes
DATABASES: Final = (
    "keystone", "glance", "placement", "nova_api", "nova", "nova_cell0", "neutron", "octavia",
)  # fmt: skip
_INFRASTRUCTURE: Final = ("rabbitmq", "epmd", "mariadb")
"""Stopped after the services (each phase all at once)."""
_GRACE_S: Final = {"octavia-worker": 1.0}
_DEFAULT_GRACE_S: Final = 10.0
_PLUGIN_PACKAGE: Final = "trio_ccm_openstack_plugins"
_ENTRY_POINTS: Final = f"""[neutron.ml2.mechanism_drivers]
agentless = {_PLUGIN_PACKAGE}.ml2_bind:AgentlessBindDriver

[octavia.network.drivers]
neutron_vip = {_PLUGIN_PACKAGE}.octavia_network:NeutronVipNetworkDriver
"""
_HEALTH: Final = {  # process name -> catalog service type it serves
    "keystone": "identity",
    "placement": "placement",
    "glance-api": "image",
    "neutron-server": "network",
    "nova-api": "compute",
    "octavia-api": "load-balancer",
}


class WorldBusyError(RuntimeError):
    """The world's folder is locked by another world, or one of its ports is taken."""


def default_root(ports: Ports) -> Path:
    """`TRIO_CCM_OPENSTACK_DIR`, else a folder per port base under the cache folder."""
    explicit = os.environ.get("TRIO_CCM_OPENSTACK_DIR")
    if explicit:
        return Path(explicit)
    return cache_dir() / "openstack" / f"world-{ports.keystone}"


@dataclass
class OpenStackWorld:
    """One OpenStack control plane on loopback (module docstring). The fixture interface
    of `tests/openstack` (docs/openstack-testworld.md) is what `start()` fills in."""

    root: Path
    ports: Ports = field(default_factory=Ports.from_environ)
    host: str = "127.0.0.1"
    dump_dir: Path | None = None
    """Where database dumps are kept (default: `<cache>/openstack`)."""
    start_timeout_s: float = 600.0

    # -- filled in by start() ---------------------------------------------------------
    region: str = "RegionOne"
    auth_url: str = ""
    ccm_auth: dict[str, str] = field(default_factory=dict)
    admin_auth: dict[str, str] = field(default_factory=dict)
    clouds_yaml: Path = Path()
    cloud_conf: Path = Path()
    network_id: str = ""
    network_name: str = bootstrap.NETWORK
    subnet_id: str = ""
    subnet_cidr: str = bootstrap.SUBNET_CIDR
    external_network_id: str = ""
    external_network_name: str = bootstrap.EXTERNAL_NETWORK
    router_id: str = ""
    image_id: str = ""
    flavors: dict[str, str] = field(default_factory=dict)
    availability_zone: str = bootstrap.AVAILABILITY_ZONE
    faults: Faults = field(default_factory=Faults)
    timings_s: dict[str, float] = field(default_factory=dict)
    """How long each phase of the last `start()` took."""
    from_dump: bool = False
    """The last `start()` filled the databases from a saved dump."""

    def __post_init__(self) -> None:
        self.layout = Layout(self.root, self.ports, self.host, region=self.region)
        self._processes: dict[str, Process] = {}
        self._proxy: ProxyThread | None = None
        self._lock: IO[str] | None = None
        self._sdk: dict[bool, Any] = {}

    # -- lifecycle --------------------------------------------------------------------
    def __enter__(self) -> OpenStackWorld:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        """Bring the world up (module docstring); on failure, stop what was started."""
        started = time.monotonic()
        layout = self.layout
        if os.geteuid() != 0:
            raise Unavailable(
                "the OpenStack test world runs MariaDB, RabbitMQ and the services as root "
                "(as on CI): run the tests as root on Debian 12"
            )
        for folder in (layout.root, layout.etc, layout.run, layout.logs, layout.data):
            folder.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            with self._phase("install"):
                installed = ensure_installed(layout.root / "apt.log")
                if installed:
                    log.info("openstack.installed", packages=len(installed))
            self._start(started)
        except BaseException:
            self.stop()
            raise

    def _start(self, started: float) -> None:
        layout = self.layout
        self.stop_leftovers()
        self._check_ports_free()
        with self._phase("prepare"):
            write_configs(layout)
            self._write_plugins()
            self._write_keys()
            self._write_octavia_ca()
            for sub in ("glance/images", "nova/instances", "neutron", "locks"):
                (layout.data / sub).mkdir(parents=True, exist_ok=True)
        with self._phase("database"):
            self._start_mariadb()
            self._start_rabbitmq()
            self._fill_databases()
        with self._phase("keystone"):
            self._start_service(
                "keystone",
                self._uwsgi(
                    "identity",
                    "/usr/bin/keystone-wsgi-public",
                    OS_KEYSTONE_CONFIG_DIR=str(layout.etc / "keystone"),
                    OS_KEYSTONE_CONFIG_FILES="keystone.conf",
                ),
            )
            self._wait_answering(["keystone"])
            with self._admin() as admin:
                if self.from_dump:
                    bootstrap.catalog(admin, layout)
                    ccm_project = bootstrap.project_id(admin, bootstrap.CCM_PROJECT)
                else:
                    ccm_project = bootstrap.identity(admin, layout)[bootstrap.CCM_PROJECT]
                    self._save_dump()
        with self._phase("services"):
            self._wait_port("rabbitmq", layout.ports.amqp)
            self._start_services()
            self._wait_answering(list(_HEALTH))
            self._check_listeners()
        with self._phase("resources"), self._admin() as admin:
            bootstrap.wait_compute(admin, timeout_s=180.0)
            made = bootstrap.resources(admin, project_id=ccm_project)
        self._proxy = ProxyThread(layout, self.faults)
        self._proxy.start()
        self._fill_in(ccm_project, made)
        self.timings_s["total"] = round(time.monotonic() - started, 1)
        log.info("openstack.up", root=str(layout.root), **self.timings_s)

    def stop(self) -> None:
        """Stop exactly what this world started (module docstring); idempotent."""
        for connection in self._sdk.values():
            with contextlib.suppress(Exception):
                connection.close()
        self._sdk.clear()
        if self._proxy is not None:
            self._proxy.stop()
            self._proxy = None
        # The OpenStack services all at once, then what they use.
        services = [name for name in self._processes if name not in _INFRASTRUCTURE]
        for phase in (services, [n for n in _INFRASTRUCTURE if n in self._processes]):
            with ThreadPoolExecutor(max_workers=max(1, len(phase))) as pool:
                for name in phase:
                    pool.submit(self._stop_one, name)
        if self._lock is not None:  # leftovers only of a world folder we hold
            self.stop_leftovers()
            self._lock.close()
            self._lock = None

    def _stop_one(self, name: str) -> None:
        process = self._processes.pop(name)
        if process.stop(grace_s=_GRACE_S.get(name, _DEFAULT_GRACE_S)):
            log.info("openstack.killed", process=name)
        (self.layout.run / f"{name}.pid").unlink(missing_ok=True)

    def stop_leftovers(self) -> list[str]:
        """Stop the process groups whose PID files are in `run/` and that still run with
        this world's marker (a crashed run's); their names."""
        stopped = []
        for pid_file in sorted(self.layout.run.glob("*.pid")):
            name = pid_file.stem
            pid = read_pid_file(pid_file)
            if pid is not None:
                stop_group(pid, grace_s=_GRACE_S.get(name, _DEFAULT_GRACE_S))
                stopped.append(name)
            pid_file.unlink(missing_ok=True)
        return stopped

    def status(self) -> dict[str, dict[str, Any]]:
        """Each running process group of this world (from its PID files): PID, RSS in MB,
        listening addresses."""
        report = {}
        for pid_file in sorted(self.layout.run.glob("*.pid")):
            pid = read_pid_file(pid_file)
            if pid is not None:
                report[pid_file.stem] = {
                    "pid": pid,
                    "rss_mb": round(group_rss_bytes(pid) / 2**20),
                    "listening": [f"{a}:{p}" for a, p in listening_addresses(pid)],
                }
        return report

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far by each running process group of this world (from its
        PID files, so an attached world's too), by name: what a bench charges to the
        services (a difference of two readings)."""
        used = {}
        for pid_file in sorted(self.layout.run.glob("*.pid")):
            pid = read_pid_file(pid_file)
            if pid is not None:
                used[pid_file.stem] = round(group_cpu_s(pid), 2)
        return used

    def processes(self) -> dict[str, int]:
        """The PIDs (= process group IDs) of the processes this world started, by name."""
        return {name: process.pid for name, process in self._processes.items()}

    # -- the fixture interface ------------------------------------------------------------
    def write_cloud_conf(
        self, path: Path, *, extra: Mapping[str, Mapping[str, str]] | None = None
    ) -> Path:
        """Write an OCCM-format cloud.conf for the ccm user to `path`, with `extra`'s
        sections and keys merged in (a key of `extra` wins); `path`."""
        sections: dict[str, dict[str, str]] = {
            "Global": {
                "auth-url": self.auth_url,
                "username": self.ccm_auth["username"],
                "password": self.ccm_auth["password"],
                "tenant-name": self.ccm_auth["project_name"],
                "domain-name": self.ccm_auth["user_domain_name"],
                "region": self.region,
            },
        }
        for section, keys in (extra or {}).items():
            sections.setdefault(section, {}).update(keys)
        lines = []
        for section, keys in sections.items():
            lines.append(f"[{section}]")
            lines += [f"{key} = {_ini_value(value)}" for key, value in keys.items()]
            lines.append("")
        path.write_text("\n".join(lines))
        return path

    def sdk(self, admin: bool = False) -> openstack.connection.Connection:
        """An openstacksdk connection as admin or as the ccm user, on the services' own
        (`internal`) endpoints: the proxy neither logs nor faults it."""
        if admin not in self._sdk:
            import openstack  # test dependency only: the runtime never imports it

            auth = self.admin_auth if admin else self.ccm_auth
            self._sdk[admin] = openstack.connect(
                auth_url=self.layout.backend_url("identity"),
                username=auth["username"],
                password=auth["password"],
                project_name=auth["project_name"],
                user_domain_name=auth["user_domain_name"],
                project_domain_name=auth["project_domain_name"],
                region_name=self.region,
                interface="internal",
                identity_interface="internal",
            )
        connection: openstack.connection.Connection = self._sdk[admin]
        return connection

    def put_load_balancer_in_error(self, lb_id: str) -> None:
        """Octavia's own record of load balancer `lb_id` set to ERROR, as its worker sets it
        when a flow fails (the noop drivers never fail on their own): every later read, by
        any client, says ERROR, and Octavia treats it as ERROR (a delete is accepted)."""
        if not re.fullmatch(r"[0-9a-f-]{36}", lb_id):
            raise ValueError(f"load balancer id {lb_id!r} is not a UUID")
        self._sql(
            f"UPDATE octavia.load_balancer SET provisioning_status = 'ERROR' WHERE id = '{lb_id}';"
        )

    def boot_server(
        self,
        name: str,
        *,
        flavor: str | None = None,
        network_id: str | None = None,
        wait: bool = True,
        timeout_s: float = 180.0,
    ) -> dict[str, Any]:
        """Boot server `name` as the ccm user (flavor by name, default m1.tiny; on the
        world's network by default, in its zone); with `wait`, until ACTIVE."""
        compute = self.sdk().compute
        server = compute.create_server(
            name=name,
            flavor_id=self.flavors[flavor or "m1.tiny"],
            image_id=self.image_id,
            networks=[{"uuid": network_id or self.network_id}],
            availability_zone=self.availability_zone,
        )
        if wait:
            server = compute.wait_for_server(server, status="ACTIVE", wait=timeout_s, interval=0.25)
        found: dict[str, Any] = server.to_dict()
        return found

    def stop_server(self, server_id: str, *, timeout_s: float = 120.0) -> None:
        """Stop the server and wait until it is SHUTOFF."""
        compute = self.sdk().compute
        compute.stop_server(server_id)
        server = compute.get_server(server_id)
        compute.wait_for_server(server, status="SHUTOFF", wait=timeout_s, interval=0.25)

    def delete_server(self, server_id: str, *, timeout_s: float = 120.0) -> None:
        """Delete the server (if it exists) and wait until Nova answers 404 for it."""
        compute = self.sdk().compute
        server = compute.find_server(server_id, ignore_missing=True)
        if server is None:
            return
        compute.delete_server(server, ignore_missing=True)
        deadline = time.monotonic() + timeout_s
        # Until Nova answers 404 (a server in status DELETED is still listed for a moment).
        while compute.find_server(server_id, ignore_missing=True) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"server {server_id} still there {timeout_s:.0f} s after delete")
            time.sleep(0.25)

    # -- pieces of start() ------------------------------------------------------------
    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        yield
        self.timings_s[name] = round(time.monotonic() - began, 1)

    def _take_lock(self) -> None:
        lock = (self.layout.root / "lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise WorldBusyError(
                f"another OpenStack world runs in {self.layout.root}: stop it, or give this "
                "one its own folder (TRIO_CCM_OPENSTACK_DIR) and ports "
                "(TRIO_CCM_OPENSTACK_PORT_BASE)"
            ) from None
        self._lock = lock

    def _check_ports_free(self) -> None:
        for name, port in self.ports.all().items():
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((self.host, port))
                except OSError as exc:
                    raise WorldBusyError(
                        f"port {port} ({name}) on {self.host} is taken ({exc.strerror}): set "
                        f"TRIO_CCM_OPENSTACK_PORT_{name.upper()}, or move every port with "
                        "TRIO_CCM_OPENSTACK_PORT_BASE"
                    ) from None

    def _environ(self, **extra: str) -> dict[str, str]:
        """What every process gets: Debian's python first on PATH, the plugins, the marker."""
        return {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.layout.data),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(self.layout.plugins),
            MARKER: str(self.layout.root),
            **extra,
        }

    def _write_plugins(self) -> None:
        plugins = self.layout.plugins
        shutil.rmtree(plugins, ignore_errors=True)
        shutil.copytree(
            Path(__file__).parent / "plugins" / _PLUGIN_PACKAGE,
            plugins / _PLUGIN_PACKAGE,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        info = plugins / f"{_PLUGIN_PACKAGE}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {_PLUGIN_PACKAGE.replace('_', '-')}\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text(_ENTRY_POINTS)
        (info / "RECORD").write_text("")

    def _write_keys(self) -> None:
        for folder in ("fernet-keys", "credential-keys"):
            keys = self.layout.etc / "keystone" / folder
            keys.mkdir(parents=True, exist_ok=True, mode=0o700)
            for index in ("0", "1"):
                key = keys / index
                if not key.exists():
                    key.write_bytes(base64.urlsafe_b64encode(os.urandom(32)))
                    key.chmod(0o600)

    def _write_octavia_ca(self) -> None:
        certs = self.layout.data / "octavia" / "certs"
        if (certs / "client.pem").exists():
            return
        certs.mkdir(parents=True, exist_ok=True)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trio-ccm test world CA")])
        now = dt.datetime.now(dt.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
        (certs / "ca.key").write_bytes(key_pem)
        (certs / "ca.pem").write_bytes(cert_pem)
        (certs / "client.pem").write_bytes(cert_pem + key_pem)

    def _run(self, name: str, argv: list[str], *, stdin: bytes | None = None) -> None:
        """Run a one-shot command of the world to completion; its output to logs/<name>.log."""
        with (self.layout.logs / f"{name}.log").open("ab") as out:
            done = subprocess.run(
                argv,
                input=stdin,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._environ(),
                check=False,
            )
        if done.returncode != 0:
            tail = (self.layout.logs / f"{name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{argv[0]} ({name}) exited {done.returncode}:\n{tail}")

    def _sql(self, statement: str) -> None:
        self._run("mariadb-client", self._mariadb_client(), stdin=statement.encode())

    def _mariadb_client(self) -> list[str]:
        return ["mariadb", "--no-defaults", "-uroot", f"--socket={self.layout.mysql_socket}"]

    def _start_process(self, name: str, argv: list[str], **environ: str) -> Process:
        process = Process.start(
            name, argv, run=self.layout.run, logs=self.layout.logs, environ=self._environ(**environ)
        )
        self._processes[name] = process
        return process

    def _start_mariadb(self) -> None:
        layout = self.layout
        datadir = layout.data / "mysql"
        shutil.rmtree(datadir, ignore_errors=True)
        self._run(
            "mariadb-install-db",
            [
                "mariadb-install-db",
                "--no-defaults",
                "--user=root",
                f"--datadir={datadir}",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
        )
        self._start_process(
            "mariadb",
            [
                "mariadbd",
                "--no-defaults",
                "--user=root",
                f"--datadir={datadir}",
                f"--socket={layout.mysql_socket}",
                f"--pid-file={layout.data / 'mariadbd.pid'}",
                f"--port={layout.ports.mariadb}",
                f"--bind-address={layout.host}",
                "--skip-name-resolve",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=128M",
                "--innodb-flush-log-at-trx-commit=0",
                "--innodb-doublewrite=0",
                "--sync-binlog=0",
                "--max-connections=1000",
                "--character-set-server=utf8",
                "--collation-server=utf8_general_ci",
                "--performance-schema=OFF",
                f"--log-error={layout.logs / 'mariadb.err'}",
            ],
        )

    def _start_rabbitmq(self) -> None:
        layout = self.layout
        rabbit = layout.data / "rabbit"
        shutil.rmtree(rabbit, ignore_errors=True)
        (rabbit / "home").mkdir(parents=True)
        (rabbit / "enabled_plugins").write_text("[].\n")
        (rabbit / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = {layout.host}:{layout.ports.amqp}\n"
            "loopback_users.guest = true\n"
            "log.console = true\n"
            "log.file = false\n"
            "vm_memory_high_watermark.absolute = 1GB\n"
            "disk_free_limit.absolute = 50MB\n"
        )
        erlang_host = "{" + ",".join(layout.host.split(".")) + "}"
        epmd = {"ERL_EPMD_ADDRESS": layout.host, "ERL_EPMD_PORT": str(layout.ports.epmd)}
        self._start_process(
            "epmd", ["epmd", "-address", layout.host, "-port", str(layout.ports.epmd)], **epmd
        )
        self._wait_port("epmd", layout.ports.epmd)
        self._start_process(
            "rabbitmq",
            ["/usr/lib/rabbitmq/bin/rabbitmq-server"],
            HOME=str(rabbit / "home"),
            RABBITMQ_NODENAME=f"trioccm{layout.ports.amqp}@localhost",
            RABBITMQ_NODE_IP_ADDRESS=layout.host,
            RABBITMQ_NODE_PORT=str(layout.ports.amqp),
            RABBITMQ_DIST_PORT=str(layout.ports.erlang_dist),
            RABBITMQ_MNESIA_BASE=str(rabbit / "mnesia"),
            RABBITMQ_LOG_BASE=str(layout.logs),
            RABBITMQ_CONFIG_FILE=str(rabbit / "rabbitmq.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(rabbit / "enabled_plugins"),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=(
                "+sbwt none +sbwtdcpu none +sbwtdio none "
                f"-kernel inet_dist_use_interface {erlang_host}"
            ),
            **epmd,
        )

    def _dump_path(self) -> Path:
        versions = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Package}=${Version}\n", *PACKAGES],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        digest = hashlib.sha256((DUMP_FORMAT + versions).encode()).hexdigest()[:16]
        return (self.dump_dir or cache_dir() / "openstack") / f"databases-{digest}.sql.gz"

    def _fill_databases(self) -> None:
        layout = self.layout
        self._wait_port("mariadb", layout.ports.mariadb, timeout_s=60)
        creates = " ".join(f"CREATE DATABASE IF NOT EXISTS {name};" for name in DATABASES)
        self._sql(
            f"CREATE USER IF NOT EXISTS 'os'@'%' IDENTIFIED BY '{layout.password}'; "
            f"GRANT ALL ON *.* TO 'os'@'%'; {creates}"
        )
        dump = self._dump_path()
        if dump.is_file():
            with gzip.open(dump) as source:
                self._run("restore", self._mariadb_client(), stdin=source.read())
            cell1 = layout.database_url("nova")
            cell0 = layout.database_url("nova_cell0")
            self._sql(
                f"UPDATE nova_api.cell_mappings SET database_connection='{cell1}', "
                f"transport_url='{layout.transport_url}' WHERE name='cell1'; "
                f"UPDATE nova_api.cell_mappings SET database_connection='{cell0}' "
                "WHERE uuid='00000000-0000-0000-0000-000000000000';"
            )
            self.from_dump = True
            return
        self.from_dump = False
        self._db_syncs()

    def _save_dump(self) -> None:
        """Dump the databases (schema, Keystone's users, roles, projects and catalog: taken
        before any other service writes) for the next start."""
        dump = self._dump_path()
        dump.parent.mkdir(parents=True, exist_ok=True)
        partial_dump = dump.with_suffix(f".{os.getpid()}.partial")
        with partial_dump.open("wb") as raw, gzip.open(raw, "wb", compresslevel=1) as out:
            done = subprocess.run(
                ["mariadb-dump", *self._mariadb_client()[1:], "--databases", *DATABASES],
                capture_output=True,
                check=True,
            )
            out.write(done.stdout)
        partial_dump.replace(dump)
        log.info("openstack.dump-saved", path=str(dump))

    def _db_syncs(self) -> None:
        layout = self.layout
        etc = layout.etc
        nova = ["nova-manage", "--config-file", str(etc / "nova/nova.conf")]
        syncs: dict[str, list[list[str]]] = {
            "keystone": [
                ["keystone-manage", "--config-file", str(etc / "keystone/keystone.conf"), "db_sync"]
            ],
            "glance": [
                ["glance-manage", "--config-file", str(etc / "glance/glance-api.conf"), "db_sync"]
            ],
            "placement": [
                [
                    "placement-manage",
                    "--config-file",
                    str(etc / "placement/placement.conf"),
                    "db",
                    "sync",
                ]
            ],
            "nova": [
                [*nova, "api_db", "sync"],
                [
                    *nova,
                    "cell_v2",
                    "map_cell0",
                    "--database_connection",
                    layout.database_url("nova_cell0"),
                ],
                [
                    *nova,
                    "cell_v2",
                    "create_cell",
                    "--name",
                    "cell1",
                    "--transport-url",
                    layout.transport_url,
                    "--database_connection",
                    layout.database_url("nova"),
                ],
                [*nova, "db", "sync"],
            ],
            "neutron": [
                [
                    "neutron-db-manage",
                    "--config-file",
                    str(etc / "neutron/neutron.conf"),
                    "upgrade",
                    "heads",
                ]
            ],
            "octavia": [
                [
                    "octavia-db-manage",
                    "--config-file",
                    str(etc / "octavia/octavia.conf"),
                    "upgrade",
                    "head",
                ]
            ],
        }

        def sync(name: str) -> None:
            for argv in syncs[name]:
                self._run(f"sync-{name}", argv)

        with ThreadPoolExecutor(max_workers=len(syncs)) as pool:
            for future in [pool.submit(sync, name) for name in syncs]:
                future.result()
        keystone_url = layout.backend_url("identity") + "/"
        self._run(
            "keystone-bootstrap",
            [
                "keystone-manage",
                "--config-file",
                str(etc / "keystone/keystone.conf"),
                "bootstrap",
                "--bootstrap-password",
                layout.password,
                "--bootstrap-admin-url",
                keystone_url,
                "--bootstrap-internal-url",
                keystone_url,
                "--bootstrap-public-url",
                keystone_url,
                "--bootstrap-region-id",
                layout.region,
            ],
        )

    def _uwsgi(self, service: str, wsgi_file: str, **environ: str) -> list[str]:
        argv = [
            "uwsgi",
            "--plugins",
            "python3",
            "--http-socket",
            f"{self.layout.host}:{self.ports.backend(service)}",
            "--wsgi-file",
            wsgi_file,
            "--master",
            "--processes",
            "1",
            "--threads",
            "4",
            "--enable-threads",
            "--lazy-apps",
            "--die-on-term",
            "--buffer-size",
            "65535",
            "--need-app",
            # uwsgi's --http-socket with keep-alive broke clients (RemoteDisconnected)
            "--add-header",
            "Connection: close",
        ]
        for key, value in environ.items():
            argv += ["--env", f"{key}={value}"]
        return argv

    def _start_service(self, name: str, argv: list[str], **environ: str) -> None:
        self._start_process(name, argv, **environ)

    def _start_services(self) -> None:
        etc = self.layout.etc
        nova = ["--config-file", str(etc / "nova/nova.conf")]
        octavia = ["--config-file", str(etc / "octavia/octavia.conf")]
        self._start_service(
            "placement",
            self._uwsgi(
                "placement",
                "/usr/bin/placement-api",
                OS_PLACEMENT_CONFIG_DIR=str(etc / "placement"),
            ),
        )
        self._start_service(
            "glance-api", ["glance-api", "--config-file", str(etc / "glance/glance-api.conf")]
        )
        self._start_service(
            "neutron-server",
            ["neutron-server", "--config-file", str(etc / "neutron/neutron.conf")],
        )
        self._start_service("nova-api", ["nova-api", *nova])
        self._start_service("nova-conductor", ["nova-conductor", *nova])
        self._start_service("nova-scheduler", ["nova-scheduler", *nova])
        # The Debian nova-compute package pulls qemu and libvirt: run its code, with the
        # fake driver, from Debian's python.
        self._start_service(
            "nova-compute",
            [
                SYSTEM_PYTHON,
                "-c",
                "import sys; from nova.cmd.compute import main; sys.exit(main())",
                *nova,
            ],
        )
        self._start_service("octavia-api", ["octavia-api", *octavia])
        self._start_service("octavia-worker", ["octavia-worker", *octavia])

    def _died(self, name: str) -> RuntimeError:
        process = self._processes[name]
        return RuntimeError(f"{name} exited while starting; {process.log}:\n{process.tail()}")

    def _wait_port(self, name: str, port: int, *, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(OSError), socket.create_connection((self.host, port), 1.0):
                return
            if not self._processes[name].alive():
                raise self._died(name)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not listen on port {port} in {timeout_s:.0f} s")
            time.sleep(0.1)

    def _wait_answering(self, names: list[str]) -> None:
        """Until each named service answers HTTP on its own port (any status)."""
        waiting = set(names)
        deadline = time.monotonic() + self.start_timeout_s
        with httpx.Client(timeout=5.0) as http:
            while waiting:
                for name in sorted(waiting):
                    with contextlib.suppress(httpx.HTTPError):
                        http.get(self.layout.backend_url(_HEALTH[name]))
                        waiting.discard(name)
                        continue
                    if not self._processes[name].alive():
                        raise self._died(name)
                if waiting and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"not answering after {self.start_timeout_s:.0f} s: {waiting}"
                    )
                if waiting:
                    time.sleep(0.2)

    def _check_listeners(self) -> None:
        """Every socket a process of the world listens on is on a loopback address."""
        for name, process in self._processes.items():
            for address, port in listening_addresses(process.pid):
                if not is_loopback(address):
                    raise RuntimeError(
                        f"{name} listens on {address}:{port}, which is not a loopback "
                        "address: the world must not be reachable from outside the machine"
                    )

    def _admin(self) -> Rest:
        return Rest(self.layout, "admin", self.layout.password, "admin")

    def _fill_in(self, project_id: str, made: bootstrap.Resources) -> None:
        layout = self.layout
        self.auth_url = layout.public_url("identity")
        common = {
            "password": layout.password,
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        }
        self.ccm_auth = {
            "username": bootstrap.CCM_USER,
            "project_name": bootstrap.CCM_PROJECT,
            "project_id": project_id,
            **common,
        }
        with self._admin() as admin:
            admin.authenticate()
            admin_project = admin.project_id
        self.admin_auth = {
            "username": "admin",
            "project_name": "admin",
            "project_id": admin_project,
            **common,
        }
        self.network_id = made.network_id
        self.subnet_id = made.subnet_id
        self.external_network_id = made.external_network_id
        self.router_id = made.router_id
        self.image_id = made.image_id
        self.flavors = dict(made.flavors)
        self.clouds_yaml = layout.root / "clouds.yaml"
        clouds = {
            name: {
                "auth": {
                    "auth_url": self.auth_url,
                    **{k: v for k, v in auth.items() if k != "project_id"},
                },
                "region_name": self.region,
                "identity_api_version": 3,
                "interface": "public",
            }
            for name, auth in (("ccm", self.ccm_auth), ("admin", self.admin_auth))
        }
        self.clouds_yaml.write_text(yaml.safe_dump({"clouds": clouds}, sort_keys=False))
        self.cloud_conf = self.write_cloud_conf(layout.root / "cloud.conf")


def _ini_value(value: str) -> str:
    """A value as OCCM's gcfg reader takes it: quoted when it holds a special character."""
    if value and all(ch.isalnum() or ch in "-_./:@" for ch in value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def unique(prefix: str) -> str:
    """A name for a test's own resource: `prefix` and a short random suffix."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def open_free_world(*, attempts: int = 5, step: int = 100) -> OpenStackWorld:
    """A started world on the environment's ports and folder (`Ports.from_environ`,
    `default_root`); when that folder or a port is busy (another session's world) and no
    folder is set explicitly, the next port base, `step` higher, up to `attempts` times."""
    base = Ports.from_environ()
    explicit = bool(os.environ.get("TRIO_CCM_OPENSTACK_DIR"))
    for attempt in range(attempts):
        ports = Ports.from_base(
            base.keystone + attempt * step,
            **{name: port + attempt * step for name, port in base.all().items()},
        )
        world = OpenStackWorld(default_root(ports), ports)
        try:
            world.start()
        except WorldBusyError as exc:
            if explicit or attempt == attempts - 1:
                raise
            log.info("openstack.busy", root=str(world.root), error=str(exc))
            continue
        return world
    raise AssertionError("unreachable")
