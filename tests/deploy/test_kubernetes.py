"""The Kubernetes manifests (integrations/kubernetes): each setup renders with ``kubectl
kustomize`` and passes ``kubernetes-validate --strict``; the pod spec runs in podman as the
kubelet would run it (args, environment, user, read-only root, volumes)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.containers import REPO, Podman, dev_tool, wait_answers
from tests.deploy.wire import job_state, run_recurrence
from tests.ports import free_port

KUSTOMIZE_ROOT = REPO / "integrations/kubernetes"
SETUPS = ["", "postgres", "sqlite"]  # the default, then the overlays


def render(setup: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [dev_tool("kubectl"), "kustomize", str(KUSTOMIZE_ROOT / setup)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def containers(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


def validate_strictly(docs: list[dict[str, Any]], path: Path) -> None:
    """``kubernetes-validate --strict`` on ``docs``: every one passes."""
    path.write_text(yaml.safe_dump_all(docs))
    result = subprocess.run(
        [dev_tool("kubernetes-validate"), "--strict", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "did not validate" not in result.stdout + result.stderr
    assert result.stdout.count(" passed for resource ") == len(docs)


@pytest.mark.parametrize("setup", SETUPS, ids=["default", *SETUPS[1:]])
def test_each_setup_renders_manifests_that_validate_strictly(setup: str, tmp_path: Path) -> None:
    validate_strictly(render(setup), tmp_path / "manifests.yaml")


def test_the_default_setup_runs_two_probed_non_root_replicas_rolled_one_at_a_time() -> None:
    docs = render("")
    deployment = find(docs, "Deployment", "zeus-bso")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    by_name = containers(deployment)
    assert by_name["migrate"]["args"][:2] == ["db", "upgrade"]
    server = by_name["server"]
    assert server["args"] == ["serve", "--no-upgrade"]
    assert server["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert server["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for container in by_name.values():
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["resources"]["requests"], container["name"]
    # The Service reaches the pods the Deployment makes.
    service = find(docs, "Service", "zeus-bso")
    labels = spec["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert find(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    secret = find(docs, "Secret", "zeus-bso")
    assert set(secret["stringData"]) == {"ZEUS_BSO_TOKEN", "ZEUS_BSO_DATABASE_URL"}
    marked = secret["metadata"]["annotations"]["zeus-bso/example-values"]
    assert all(key in marked for key in secret["stringData"])
    # The pod runs as the image's user, on the port the image exposes.
    dockerfile = (REPO / "integrations/docker/Dockerfile").read_text()
    assert f"USER {pod['securityContext']['runAsUser']}:" in dockerfile
    assert f"EXPOSE {server['ports'][0]['containerPort']}" in dockerfile


def test_the_postgres_overlay_points_the_server_at_its_statefulset() -> None:
    docs = render("postgres")
    statefulset = find(docs, "StatefulSet")
    assert statefulset["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]
    service = find(docs, "Service", statefulset["spec"]["serviceName"])
    deployment = find(docs, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    for container in containers(deployment).values():
        env = {e["name"]: e for e in container["env"]}
        assert f"@{service['metadata']['name']}:5432/" in env["ZEUS_BSO_DATABASE_URL"]["value"]
        # The password: a file of the database's Secret, read at each new connection.
        password = Path(env["ZEUS_BSO_DB_PASSWORD_FILE"]["value"])
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(password.parent)]
        secret = volumes[mount["name"]]["secret"]
        (item,) = [i for i in secret["items"] if i["path"] == password.name]
        assert item["key"] in find(docs, "Secret", secret["secretName"])["stringData"]


def test_the_sqlite_overlay_is_one_replica_on_a_volume_replaced_not_rolled() -> None:
    docs = render("sqlite")
    deployment = find(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    claim = find(docs, "PersistentVolumeClaim")["metadata"]["name"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim
    for container in containers(deployment).values():
        assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]


def test_the_sqlite_pod_runs_in_podman_as_the_manifests_say(
    podman: Podman, server_image: str, volume: str
) -> None:
    """The rendered pod, with podman standing in for the kubelet: each container with its
    args, its ConfigMap and Secret environment, the pod's user, a read-only root, no
    capabilities, /tmp and /data volumes; the init container first."""
    docs = render("sqlite")
    deployment = find(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    token = find(docs, "Secret", "zeus-bso")["stringData"]["ZEUS_BSO_TOKEN"]
    port = free_port()
    name = f"zeus-bso-test-pod-{uuid.uuid4().hex[:8]}"
    try:
        for container in pod["initContainers"]:
            code = podman.run(
                "run", "--rm", *_pod_args(docs, pod, container, volume), server_image,
                *container["args"], check=False,
            )  # fmt: skip
            assert code.returncode == 0, code.stdout + code.stderr
        server = pod["containers"][0]
        args = ["-d", "--name", name, "-p", f"127.0.0.1:{port}:8000"]
        podman.run(
            "run", *args, *_pod_args(docs, pod, server, volume), server_image, *server["args"]
        )
        url = f"http://127.0.0.1:{port}"
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            wait_answers(url + server[probe]["httpGet"]["path"], logs=[podman.logs(name)])
        job_id = f"pod-{uuid.uuid4().hex[:8]}"
        run_recurrence(url, token, job_id)
        assert len(job_state(url, token, job_id)["trials"]) == 1
    finally:
        podman.run("rm", "-f", "-t", "5", name, check=False)


def _pod_args(
    docs: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any], volume: str
) -> list[str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(find(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
        else:
            env.update(find(docs, "Secret", source["secretRef"]["name"])["stringData"])
    env.update({e["name"]: e["value"] for e in container.get("env", [])})  # env wins
    context = pod["securityContext"] | container["securityContext"]
    args = [f"--user={context['runAsUser']}:{context['runAsGroup']}"]
    args += [f"--group-add={context['fsGroup']}"]
    if context["readOnlyRootFilesystem"]:
        args.append("--read-only")
    args += [f"--cap-drop={cap}" for cap in context["capabilities"]["drop"]]
    if not context["allowPrivilegeEscalation"]:
        args.append("--security-opt=no-new-privileges")
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container.get("volumeMounts", []):
        if "emptyDir" in volumes[mount["name"]]:
            args.append(f"--tmpfs={mount['mountPath']}")
        else:
            args.append(f"--volume={volume}:{mount['mountPath']}")
    return args + [f"--env={key}={value}" for key, value in env.items()]


def test_the_training_pod_example_restores_power_limits_before_it_stops(tmp_path: Path) -> None:
    """``power-restore-prestop.yaml``: valid, its preStop hook runs ``zeus-bso power restore``,
    and the records folder it mounts from the node is the one the run and the hook use."""
    docs = [
        doc
        for doc in yaml.safe_load_all((KUSTOMIZE_ROOT / "power-restore-prestop.yaml").read_text())
        if doc
    ]
    validate_strictly(docs, tmp_path / "pod.yaml")
    (pod,) = docs
    (container,) = pod["spec"]["containers"]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["zeus-bso", "power", "restore"]
    env = {e["name"]: e["value"] for e in container["env"]}
    (mount,) = container["volumeMounts"]
    (volume,) = pod["spec"]["volumes"]
    assert env["ZEUS_BSO_POWER_RECORDS"] == mount["mountPath"] == volume["hostPath"]["path"]
    assert "SYS_ADMIN" in container["securityContext"]["capabilities"]["add"]
