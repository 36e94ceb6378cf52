"""The `trio-ccm` command line: argument checks that fail before any server starts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from trio_ccm import cli
from trio_ccm._version import __version__

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
apiVersion: apps/v1
kind: Deployment
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
            UNSERVED_KIND, "the emulator does not serve Deployment in apps/v1", id="unserved-kind"
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


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """`trio-ccm` with no command prints usage to stderr and exits 2."""
    assert _run([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: trio-ccm" in captured.err
    assert "apiserver" in captured.err


def test_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`trio-ccm --version` prints the package version and exits 0."""
    assert _run(["--version"]) == 0
    assert capsys.readouterr().out == f"trio-ccm {__version__}\n"


def test_unknown_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown subcommand is an argparse usage error (exit 2)."""
    assert _run(["controller"]) == 2
    assert "invalid choice: 'controller'" in capsys.readouterr().err
