"""The lowest versions of its dependencies that pyproject.toml allows, as uv's
``--resolution lowest-direct`` installs them: a training environment that pins older packages
still meets every floor, and pip then keeps what it has, so the package must run there. The
suite's own environment has the newest; this checks the floors. (typer 0.12, the floor before,
failed at the first command: "Type not yet supported: str | None"; FastAPI before 0.117 refused
to build the app; uvicorn before 0.47 has no ``Config.load_app``; click's ``ClickException`` is
what typer raises for a usage error before 0.28.)"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.environments import lower_bounds, release
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"
RAISED = {"typing-extensions"}
"""Floors that a dependency's own raises (FastAPI 0.117 asks typing-extensions 4.8)."""


def floors() -> dict[str, str]:
    """Each requirement's lower bound (``name>=version``) of the core and the server extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return lower_bounds(project["dependencies"] + project["optional-dependencies"]["server"])


def test_the_lowest_allowed_versions_serve_train_and_say_usage_errors(tmp_path: Path) -> None:
    if not UV.exists():
        pytest.skip(f"needs uv beside this Python ({UV}): scripts/test installs it")
    venv = tmp_path / "venv"
    subprocess.run([UV, "venv", "-q", "--python", sys.executable, venv], check=True, timeout=120)
    python, bin_ = venv / "bin" / "python", venv / "bin"
    installed = subprocess.run(
        [UV, "pip", "install", "-q", "--python", python, "--resolution", "lowest-direct",
         "-e", f"{ROOT}[server]"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    listed = subprocess.run(
        [UV, "pip", "list", "--python", python, "--format", "json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    versions = {p["name"].lower(): p["version"] for p in json.loads(listed.stdout)}
    wanted = floors()
    assert {"typer", "fastapi", "uvicorn", "pydantic", "httpx", "sqlalchemy"} <= set(wanted)
    for name, floor in wanted.items():  # the floors themselves, not something newer
        if name in RAISED:  # a dependency of ours asks for more
            assert release(versions[name]) >= release(floor), (name, versions[name], floor)
        else:
            assert release(versions[name]) == release(floor), (name, versions[name], floor)

    schema = subprocess.run(
        [bin_ / "zeus-bso-server", "openapi"], capture_output=True, text=True, timeout=120
    )
    assert schema.returncode == 0, schema.stderr[-3000:]
    assert "/jobs/batch_size" in json.loads(schema.stdout)["paths"]
    usage = subprocess.run(
        [bin_ / "zeus-bso-server", "serve", "--log-format", "json", "--bogus"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert usage.returncode == 2, usage.stderr[-3000:]
    said = json.loads(usage.stderr.splitlines()[-1])
    assert said["level"] == "CRITICAL", said
    assert "--bogus" in said["message"], said

    url = f"http://127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [bin_ / "zeus-bso-server", "serve", "--db", f"sqlite:///{tmp_path / 'bso.db'}",
         "--port", url.rsplit(":", 1)[1]],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        run = subprocess.run(
            [python, ROOT / "tests/scripts/upstream_recurrences.py", url, "3"],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        trials = json.loads(run.stdout)["trials"]
        assert len(trials) == 3, trials
        assert all(trial["converged"] for trial in trials), trials
        jobs = subprocess.run(
            [bin_ / "zeus-bso", "jobs", "list", "--server", url],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert jobs.returncode == 0, jobs.stderr[-3000:]
        assert trials[0]["job_id"] in jobs.stdout
    finally:
        server.terminate()
        _, errors = server.communicate(timeout=60)
    assert "Finished server process" in errors, errors[-3000:]  # shut down, not killed
