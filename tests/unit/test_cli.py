"""The `trio-ccm` command line: exit codes and messages for what fails before (or while)
starting, through `cli.main(argv)`, without spawning a process."""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import aclosing
from pathlib import Path

import pytest
import structlog
import trio

from trio_ccm import cli
from trio_ccm._version import __version__
from trio_ccm.cli import process
from trio_ccm_testbed import cli as testing_cli

VALID_ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ok}
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get]
"""

INVALID_ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: broken}
rules:
- apiGroups: [""]
  resources: [nodes]
"""

UNSERVED_KIND = """
apiVersion: batch/v1
kind: Job
metadata: {name: web}
"""

BAD_BINDING = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bad}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: x}
subjects: [{kind: User, name: bob}]
"""


def _run(argv: Sequence[str]) -> int | str | None:
    """cli.main's exit code, whether it returns it or argparse exits with it."""
    try:
        return cli.main(list(argv))
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize(
    ("host", "fragment"),
    [
        pytest.param(
            "0.0.0.0",  # noqa: S104 - the point is that it is refused
            "--host 0.0.0.0: the emulator listens on loopback only",
            id="any",
        ),
        pytest.param("10.1.2.3", "--host 10.1.2.3: the emulator listens on loopback", id="private"),
        pytest.param("::", "--host ::: the emulator listens on loopback only", id="ipv6-any"),
        pytest.param("example.com", "--host example.com: the emulator", id="hostname"),
    ],
)
def test_non_loopback_host_is_refused(
    capsys: pytest.CaptureFixture[str], host: str, fragment: str
) -> None:
    """A --host that is not loopback exits 2 and says the emulator listens on loopback only."""
    assert _run(["apiserver", "--host", host]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trio-ccm: error: ")
    assert fragment in err
    assert "127.0.0.1, ::1 or localhost" in err


@pytest.mark.parametrize(
    ("port", "fragment"),
    [
        pytest.param("70000", "--port 70000: must be between 0 and 65535", id="too-large"),
        pytest.param("65536", "--port 65536: must be between 0 and 65535", id="just-too-large"),
        pytest.param("-1", "--port -1: must be between 0 and 65535", id="negative"),
        pytest.param("http", "argument --port: invalid int value: 'http'", id="not-a-number"),
    ],
)
def test_bad_port_is_refused(capsys: pytest.CaptureFixture[str], port: str, fragment: str) -> None:
    """A --port outside 0..65535 or not a number exits 2 with a message naming it."""
    assert _run(["apiserver", f"--port={port}"]) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize(
    "kind",
    [pytest.param("missing", id="missing-file"), pytest.param("directory", id="directory")],
)
def test_unreadable_rbac_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    """An --rbac file that cannot be read exits 2 with a message naming the file and why."""
    path = tmp_path / "rbac.yaml"
    if kind == "directory":
        path.mkdir()
    assert _run(["apiserver", "--rbac", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"trio-ccm: error: --rbac {path}: cannot read the file: " in err
    reason = "No such file or directory" if kind == "missing" else "Is a directory"
    assert reason in err


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param(
            INVALID_ROLE,
            'ClusterRole.rbac.authorization.k8s.io "broken" is invalid: rules[0].verbs: '
            "Required value",
            id="invalid-role",
        ),
        pytest.param(
            BAD_BINDING,
            'ClusterRoleBinding.rbac.authorization.k8s.io "bad" is invalid: roleRef.kind: '
            'Unsupported value: "Role"',
            id="cluster-binding-to-role",
        ),
        pytest.param(
            UNSERVED_KIND, "the emulator does not serve Job in batch/v1", id="unserved-kind"
        ),
        pytest.param("rules: [unclosed", "while parsing a flow sequence", id="not-yaml"),
    ],
)
def test_rbac_file_with_invalid_object_names_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, fragment: str
) -> None:
    """An --rbac file holding an invalid object exits 2 with a message naming that file."""
    good = tmp_path / "good.yaml"
    good.write_text(VALID_ROLE)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert _run(["apiserver", "--rbac", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trio-ccm: error: --rbac {bad}: ")
    assert str(good) not in err
    assert fragment in err


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("- a\n- b\n", id="list"),
        pytest.param("just a string\n", id="scalar"),
    ],
)
def test_rbac_document_that_is_not_an_object_gets_a_clear_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    """A YAML document that is not a mapping is reported as such, not as a Python error."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert _run(["apiserver", "--rbac", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trio-ccm: error: --rbac {bad}: ")
    assert "has no attribute" not in err


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Undo what the CCM path's configure_logging does to the process (handlers, levels,
    structlog's configuration), so other tests keep the suite's set-up."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in ("hypercorn", "httpx", "httpcore")}
    config = structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in quiet.items():
        logging.getLogger(name).setLevel(old)
    structlog.configure(**config)


@pytest.fixture
def cloud_config(tmp_path: Path) -> Path:
    """A valid `sim` cloud config (nothing listens there: loading the provider needs none)."""
    path = tmp_path / "cloud.yaml"
    path.write_text("url: http://127.0.0.1:9\nreplica: test\n")
    return path


def _json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        pytest.param(["--foo"], "unknown flag: --foo", id="unknown-flag"),
        pytest.param(["--kube-api-qps=abc"], "--kube-api-qps=abc: not a number", id="bad-value"),
        pytest.param(
            ["--leader-elect", "false"],
            "a boolean flag takes its value after '=', e.g. --leader-elect=false",
            id="bool-with-space",
        ),
        pytest.param(
            ["--leader-elect-lease-duration=15"],
            "--leader-elect-lease-duration=15: a duration needs a unit",
            id="duration-without-unit",
        ),
        pytest.param(["controller"], "unexpected argument 'controller'", id="positional"),
        pytest.param(
            ["--cloud-provider=sim", "--cloud-config={config}", "--controllers=*,bogus"],
            "--controllers=*,bogus: unknown controller 'bogus'",
            id="unknown-controller",
        ),
        pytest.param(
            [],
            "--cloud-provider is required: name the cloud, e.g. --cloud-provider=sim",
            id="missing-cloud-provider",
        ),
        pytest.param(
            ["--cloud-provider=nimbus", "--cloud-config={config}"],
            "--cloud-provider=nimbus: unknown cloud provider (installed: aws, openstack, sim)",
            id="unknown-cloud-provider",
        ),
    ],
)
def test_rejected_command_line_exits_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], cloud_config: Path, argv: list[str], fragment: str
) -> None:
    """A bad command line exits 2 with `trio-ccm: <message naming the flag>` and a hint."""
    argv = [arg.replace("{config}", str(cloud_config)) for arg in argv]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0].startswith("trio-ccm: ")
    assert fragment in lines[0]
    assert lines[-1] == "Run 'trio-ccm --help' for usage."


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        pytest.param(None, "cannot read the cloud config file (No such file", id="missing"),
        pytest.param("url: [unclosed\n", "sim cloud config: not valid YAML", id="not-yaml"),
        pytest.param("region: x\n", "sim cloud config: unknown key(s) region", id="bad-key"),
        pytest.param("", "sim cloud config: `url` is required", id="empty"),
    ],
)
def test_unusable_cloud_config_exits_1_naming_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | None, fragment: str
) -> None:
    """A --cloud-config the provider cannot use exits 1 with a message naming the file."""
    path = tmp_path / "cloud.yaml"
    if content is not None:
        path.write_text(content)
    assert cli.main(["--cloud-provider=sim", f"--cloud-config={path}"]) == 1
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"trio-ccm: --cloud-config={path}: ")
    assert fragment in first


@pytest.mark.usefixtures("restore_logging")
def test_unreadable_kubeconfig_exits_1_after_logging_flags_and_ignored_ones(
    capsys: pytest.CaptureFixture[str], cloud_config: Path, tmp_path: Path
) -> None:
    """A start that fails at the kubeconfig exits 1; before that the effective settings are
    logged once and each accepted-but-ineffective flag is warned about once."""
    missing = tmp_path / "nope.kubeconfig"
    argv = [
        "--cloud-provider=sim",
        f"--cloud-config={cloud_config}",
        f"--kubeconfig={missing}",
        "--secure-port=0",
        "--configure-cloud-routes=false",
        "--profiling",
        "--profiling=false",
        "--feature-gates=A=true",
        "--logging-format=json",
    ]
    assert cli.main(argv) == 1
    lines = _json_lines(capsys.readouterr().err)
    events = [line["event"] for line in lines]
    assert events.count("ccm.flags") == 1
    flags = next(line for line in lines if line["event"] == "ccm.flags")
    settings = flags["settings"]
    assert isinstance(settings, dict)
    assert settings["cloud_provider"] == "sim"
    assert settings["ignored_flags"] == ["--profiling", "--feature-gates"]
    ignored = [line for line in lines if line["event"] == "flag.ignored"]
    assert [(line["flag"], line["level"]) for line in ignored] == [
        ("--profiling", "warning"),
        ("--feature-gates", "warning"),
    ]
    assert all("no effect in trio-ccm" in str(line["reason"]) for line in ignored)
    failed = [line for line in lines if line["event"] == "ccm.failed"]
    assert len(failed) == 1
    assert str(missing) in str(failed[0]["error"])
    assert "exception" not in failed[0]  # a configuration problem: no traceback
    assert lines[-1]["event"] == "ccm.exit"
    assert lines[-1]["exit_code"] == 1


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--help"], id="long"),
        pytest.param(["-h"], id="short"),
        pytest.param(["--cloud-provider=sim", "--foo", "--help"], id="wins-over-bad-flags"),
    ],
)
def test_help_prints_usage_and_commands_and_exits_0(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """--help (or -h, anywhere) prints the flag list, the installed providers and the
    subcommands to stdout, exit 0."""
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("Usage: trio-ccm [flags]")
    assert "--cloud-provider string" in captured.out
    assert "(installed: aws, openstack, sim)" in captured.out
    for command in ("apiserver", "testbed", "demo"):
        assert f"trio-ccm {command}" in captured.out
    assert captured.err == ""


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--version"], id="alone"),
        pytest.param(["--cloud-provider=x", "--version=true"], id="with-flags"),
    ],
)
def test_version_prints_the_version(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """`trio-ccm --version` prints the package version to stdout and exits 0."""
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == f"trio-ccm {__version__}\n"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        pytest.param(
            ["testbed", "--cloud-config-out=c"],
            "the following arguments are required: --kubeconfig-out",
            id="testbed-missing-kubeconfig-out",
        ),
        pytest.param(
            ["testbed", "--kubeconfig-out=k", "--cloud-config-out=c", "--heartbeat=0s"],
            "argument --heartbeat: '0s': must be more than 0s",
            id="testbed-zero-heartbeat",
        ),
        pytest.param(
            ["testbed", "--kubeconfig-out=k", "--cloud-config-out=c", "--heartbeat=soon"],
            "argument --heartbeat: 'soon': not a duration",
            id="testbed-bad-heartbeat",
        ),
        pytest.param(
            ["testbed", "--kubeconfig-out=k", "--cloud-config-out=c", "--nodes=-1"],
            "argument --nodes: -1: must be 0 or more",
            id="testbed-negative-nodes",
        ),
        pytest.param(
            ["testbed", "--kubeconfig-out=k", "--cloud-config-out=c", "--host=10.1.2.3"],
            "--host 10.1.2.3: the testbed listens on loopback only",
            id="testbed-not-loopback",
        ),
        pytest.param(
            ["testbed", "--kubeconfig-out=k", "--cloud-config-out=c", "--lb-network=10.0.0.0/33"],
            "argument --lb-network: '10.0.0.0/33': an IPv4 CIDR, e.g. 10.128.0.0/9",
            id="testbed-bad-lb-network",
        ),
        pytest.param(
            [
                "testbed",
                "--kubeconfig-out=k",
                "--cloud-config-out=c",
                "--service-node-port-range=32767-30000",
            ],
            "argument --service-node-port-range: '32767-30000': give FIRST-LAST ports",
            id="testbed-bad-node-port-range",
        ),
        pytest.param(
            ["demo", "--cloud-port=70000"],
            "argument --cloud-port: 70000: must be between 0 and 65535",
            id="demo-bad-port",
        ),
        pytest.param(
            ["demo", "--", "--kube-api-qps=abc"],
            "CCM flags after --: --kube-api-qps=abc: not a number",
            id="demo-bad-ccm-flag",
        ),
    ],
)
def test_bad_testbed_and_demo_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    """testbed and demo reject bad arguments with exit 2 and a message naming them."""
    assert _run(argv) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("60s", 60.0, id="seconds"),
        pytest.param("1m30s", 90.0, id="minutes-seconds"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("2.5", 2.5, id="plain-number"),
        pytest.param("1h", 3600.0, id="hours"),
    ],
)
def test_heartbeat_takes_go_durations(text: str, seconds: float) -> None:
    """--heartbeat reads Go durations and plain seconds."""
    assert testing_cli._duration(text) == seconds


class FakeServing:
    """Records shutdown requests, as `Serving.shut_down` receives them."""

    def __init__(self) -> None:
        self.shutdowns = 0
        self.forced = 0

    def shut_down(self, *, force: bool = False) -> None:
        if force:
            self.forced += 1
        else:
            self.shutdowns += 1


async def _signals(*signums: int) -> AsyncGenerator[int, None]:
    for signum in signums:
        yield signum
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize(
    ("signums", "started", "shutdowns", "cancelled", "forced"),
    [
        pytest.param([signal.SIGTERM], True, 1, False, False, id="one-graceful"),
        pytest.param([signal.SIGINT, signal.SIGTERM], True, 1, True, True, id="second-forces"),
        pytest.param([signal.SIGTERM], False, 0, True, False, id="before-start-stops-at-once"),
    ],
)
async def test_first_signal_drains_and_second_cancels_at_once(
    signums: list[int], started: bool, shutdowns: int, cancelled: bool, forced: bool
) -> None:
    """The first SIGTERM/SIGINT asks for a graceful shutdown (or, before the replica has
    started, stops at once); a second one stops the replica at once (forced), cancels
    everything, marks the exit forced and arms the exit deadline."""
    fake = FakeServing()
    shutdown = process.Shutdown()
    armed: list[bool] = []
    with trio.CancelScope() as scope:
        async with aclosing(_signals(*signums)) as signals:
            await process.watch_signals(
                signals,
                shutdown,
                lambda: fake if started else None,  # type: ignore[arg-type,return-value]
                scope,
                on_force=lambda: armed.append(True),
            )
    assert fake.shutdowns == shutdowns
    assert fake.forced == (1 if forced else 0)
    assert scope.cancel_called is cancelled
    assert shutdown.forced is forced
    assert armed == ([True] if forced else [])
    assert shutdown.signals == len(signums)
