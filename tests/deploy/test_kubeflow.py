"""The Kubeflow example (integrations/kubeflow): the PyTorchJob's pods and arguments, and the
same training run locally with DDP on two CPU processes (torchrun, gloo) against a server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.containers import REPO
from tests.deploy.test_kubernetes import find, render, validate_strictly
from tests.deploy.wire import job_state
from tests.helpers import (
    ServerProcess,
    environment_without_settings,
    load_module,
    sqlite_url,
    unique_id,
)
from tests.preloaded_python import preloaded

KUBEFLOW = REPO / "integrations/kubeflow"
SCRIPT = KUBEFLOW / "train_mnist.py"
WATTS = 50.0


def _script() -> ModuleType:
    pytest.importorskip("lightning.pytorch", reason="pip install 'zeus-bso[lightning]'")
    module: ModuleType = load_module("train_mnist", SCRIPT)
    return module


def _job() -> dict[str, Any]:
    job = yaml.safe_load((KUBEFLOW / "pytorchjob.yaml").read_text())
    assert isinstance(job, dict)
    return job


def test_the_pytorchjob_trains_on_two_pods_against_the_zeus_bso_service(tmp_path: Path) -> None:
    job = _job()
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"}
    pods = sum(spec["replicas"] for spec in replicas.values())
    assert pods == 2
    base = render("")
    service, secret = find(base, "Service", "zeus-bso"), find(base, "Secret", "zeus-bso")
    parser = _script().build_parser()
    for role, spec in replicas.items():
        container = spec["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"  # the operator's convention
        assert container["command"][-1].endswith("/train_mnist.py")
        args = parser.parse_args(container["args"])
        assert args.num_nodes == pods, role
        assert args.devices == container["resources"]["limits"]["nvidia.com/gpu"]
        port = service["spec"]["ports"][0]["port"]
        assert args.server == f"http://{service['metadata']['name']}:{port}"
        env = {e["name"]: e for e in container["env"]}
        assert "ZEUS_BSO_TOKEN" not in env  # the token is a file of the Secret
        token_file = Path(env["ZEUS_BSO_TOKEN_FILE"]["value"])
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "zeus-bso-token"]
        assert mount["readOnly"]
        assert token_file.parent == Path(mount["mountPath"])
        volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
        volume = volumes["zeus-bso-token"]["secret"]
        assert volume["secretName"] == secret["metadata"]["name"]
        (item,) = volume["items"]
        assert item["key"] in secret["stringData"]
        assert item["path"] == token_file.name
        # A Secret volume's files are root's: the pod's user reads the token through the
        # group that fsGroup gives them (0400 would leave it unreadable to a non-root user).
        pod = spec["template"]["spec"]["securityContext"]
        assert pod["runAsUser"] != 0
        assert pod["fsGroup"] == pod["runAsUser"]
        assert volume["defaultMode"] == 0o440
        # What a run keeps for the server (its outbox) lies on a volume of the pod, which a
        # restarted container finds, not in the container's own files.
        cache = Path(env["ZEUS_BSO_CACHE_DIR"]["value"])
        (kept,) = [m for m in container["volumeMounts"] if cache.is_relative_to(m["mountPath"])]
        assert not kept.get("readOnly")
        on = volumes[kept["name"]]
        assert "persistentVolumeClaim" in on or on["emptyDir"].get("medium") != "Memory"
    # The pods themselves pass strict validation (the PyTorchJob kind is a CRD's).
    as_pods = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": role.lower()}} | spec["template"]
        for role, spec in replicas.items()
    ]
    validate_strictly(as_pods, tmp_path / "pods.yaml")


def test_ddp_on_two_cpu_processes_one_rank_talks_every_rank_follows(
    tmp_path: Path, lightning_python: str
) -> None:
    """torchrun starts two gloo processes: one trial (only rank 0 asks), the same batch size on
    both ranks, both stop at the epoch the server says, and the reported energy is both ranks'
    (each estimated as time x WATTS).

    One recurrence: the first run is at the default batch size, which no cost bound stops, so
    its outcome does not depend on how fast the machine is. A later run would be stopped as soon
    as its cost (here its time) went over a bound set by the first run's, which a busy machine
    can make it do; recurrences are tested with Lightning's Trainer in
    tests/integrations/test_lightning.py. The ranks run as its docstring installs them, with
    torch and ``zeus-bso[lightning]`` alone (`tests.environments`).
    """
    _script()
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path)
    job_id = unique_id("mnist")
    try:
        run = subprocess.run(
            [preloaded(lightning_python), "-m", "torch.distributed.run", "--nproc-per-node", "2"]
            + [str(SCRIPT), "--accelerator", "cpu", "--devices", "2", "--data", "synthetic"]
            + ["--server", server.url, "--job-id", job_id, "--target-accuracy", "0.9"]
            + ["--max-epochs", "4", "--estimate-watts", str(WATTS)],
            cwd=tmp_path,
            env=environment_without_settings(),
            capture_output=True,
            text=True,
            timeout=240,
        )
        said = run.stdout[-3000:] + run.stderr[-3000:]
        assert run.returncode == 0, said
        ranks = [
            json.loads(line.split(" ", 1)[1])
            for line in run.stdout.splitlines()
            if line.startswith("ZEUS_BSO_RANK_RESULT ")
        ]
        # A run that exits 0 without both ranks' results: what it printed tells why.
        assert sorted(r["rank"] for r in ranks) == [0, 1], said
        state = job_state(server.url, None, job_id)
        (trial,) = state["trials"]  # one trial: only rank 0 asked
        assert trial["batch_size"] == state["job"]["default_batch_size"]
        assert {r["batch_size"] for r in ranks} == {trial["batch_size"]}
        assert {r["epochs"] for r in ranks} == {trial["epochs"]}
        assert trial["converged"], trial
        assert trial["epochs"] < 4, trial  # stopped by the server, not by max_epochs
        assert 1.6 < trial["energy"] / (WATTS * trial["time"]) < 2.4
    finally:
        server.stop()
