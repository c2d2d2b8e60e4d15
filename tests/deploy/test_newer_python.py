"""The package on a newer Python than the suite's 3.11: Debian trixie's python3 (3.13), the wheel
built there and installed with the server extra as a user installs it, the server started, a
script of upstream Zeus's loop shape (`tests/scripts/upstream_recurrences.py`) run against it for
three recurrences, and the simulator run on the shipped trace. (Torch and the frameworks are not
installed: their CPU builds here are 3.11's; the server, the client, the policy and the simulator
are what a newer Python could break.)"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from tests.containers import NEWER_PYTHON_IMAGE, REPO, Podman, host_index_mounts

COMMANDS = """
set -e
python3 -m venv /venv
/venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir \
  --no-warn-script-location /src'[server]' > /tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 3; }
/venv/bin/zeus-bso-server serve --db sqlite:////tmp/bso.db > /tmp/server.log 2>&1 &
/venv/bin/python /work/script.py http://127.0.0.1:8000 3 > /work/run.json \
  || { cat /tmp/server.log; exit 4; }
/venv/bin/zeus-bso simulate --workload squad --gpu v100 --recurrences 5 --seeds 0 \
  --json /work/simulated.json > /dev/null
"""


def test_the_server_client_and_simulator_run_on_a_newer_python(
    podman: Podman, tmp_path: Path
) -> None:
    podman.ensure_newer_python_image()
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(REPO / "tests/scripts/upstream_recurrences.py", work / "script.py")
    mounts = ["-v", f"{source}:/src:ro", "-v", f"{work}:/work", *host_index_mounts()]
    name = f"zeus-bso-test-newer-python-{uuid.uuid4().hex[:8]}"
    ran = podman.run(
        "run",
        "--rm",
        "--name",
        name,
        *mounts,
        NEWER_PYTHON_IMAGE,
        "bash",
        "-c",
        COMMANDS,
        check=False,
        timeout=600,
    )
    assert ran.returncode == 0, f"{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"

    run = json.loads((work / "run.json").read_text())
    assert run["python"] >= [3, 13]
    assert len(run["trials"]) == 3
    assert sorted(trial["batch_size"] for trial in run["trials"]) == sorted(run["sizes"])
    assert all(trial["converged"] for trial in run["trials"]), run["trials"]
    assert run["sizes"][0] == 16  # the default first
    simulated = json.loads((work / "simulated.json").read_text())
    assert [result["workload"] for result in simulated["results"]] == ["squad"]
    assert simulated["results"][0]["regret"] >= 1.0
