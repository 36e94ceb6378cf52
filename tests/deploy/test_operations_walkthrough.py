"""docs/operations.md's walkthrough, run as written: from `kubectl apply -k deploy/` to a
running CCM against the emulator, with RBAC enforced from the applied manifests.

The shell block marked `# walkthrough` is extracted and run with `bash -euo pipefail`, as a
newcomer would paste it: a testbed process (emulator over TLS with RBAC on, simulated
cloud, kubelets), the manifests applied with the real kubectl, a ServiceAccount token, and
the CCM started with the Deployment's own args. The block waits for its own milestones
(readiness, initialised Nodes, an EXTERNAL-IP) by polling the processes it started.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "operations.md"


def walkthrough() -> str:
    text = DOC.read_text()
    found = re.search(r"```sh\n(# walkthrough\n.*?)```", text, re.DOTALL)
    assert found is not None, "docs/operations.md lost its `# walkthrough` block"
    return found.group(1)


@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("kubectl", "curl", "bash")),
    reason="needs kubectl, curl and bash",
)
def test_the_operations_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """docs/operations.md's walkthrough block runs as written and reaches each milestone."""
    script = tmp_path / "walkthrough.sh"
    script.write_text(walkthrough())
    venv_bin = Path(sys.executable).parent
    env = {
        **os.environ,
        "REPO": str(REPO),
        "TMPDIR": str(tmp_path),
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("KUBECONFIG", None)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", str(script)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, (out + result.stderr)[-4000:]
    assert "deployment.apps/cloud-controller-manager created" in out
    assert "clusterrole.rbac.authorization.k8s.io/system:cloud-controller-manager created" in out
    assert re.search(r"^node-0003\s+Ready\s", out, re.MULTILINE)
    assert re.search(r"^web\s+LoadBalancer\s+\S+\s+203\.0\.113\.\d+\s", out, re.MULTILINE)
    # `grep -c forbidden ccm.log`: the CCM met no 403 with deploy/rbac.yaml's grants.
    assert out.rstrip().splitlines()[-1] == "0"
