"""The example scripts run as the README says, against a real server, each in a fresh virtual
environment that has only what its docstring installs (``pip install torch 'zeus-bso[hf]'``):
an extra that missed what its example imports fails here, which the suite's own environment,
with every extra, would never show."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.environments import Environments
from tests.helpers import ServerProcess, sqlite_url
from tests.integrations.gpu_double import A100, LIMIT_W, WATTS, environment, gpu
from tests.ports import free_port
from tests.preloaded_python import preloaded
from zeus_bso.client import ServerClient

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
OTHER_PARTS = {  # what an example's install must not bring (another extra's)
    "zeus-bso": ["fastapi", "lightning", "transformers", "accelerate"],
    "zeus-bso[lightning]": ["fastapi", "transformers"],
    "zeus-bso[hf]": ["fastapi", "lightning"],
    "zeus-bso[accelerate]": ["fastapi", "lightning", "transformers"],
}


def documented_install(script: str) -> str:
    """What the example's docstring installs beside torch: ``zeus-bso`` or ``zeus-bso[extra]``."""
    said = re.search(
        r"pip install torch '?(zeus-bso(?:\[[a-z]+\])?)'?", (EXAMPLES / script).read_text()
    )
    assert said is not None, f"{script} says how to install what it needs"
    return said[1]


TWO_PROCESSES = {"accelerate_loop.py": "accelerate", "fabric_loop.py": "fabric"}
"""The loop examples, run on two processes (their job ids' prefixes): a process group and
NVML's test double beside the fresh install."""

PRELOADED_ENVIRONMENTS = {"zeus-bso[lightning]", "zeus-bso[accelerate]"}
"""The environments whose examples start three processes here (Lightning's Trainer, then Fabric
and the rank its launcher starts; torchrun and its two ranks): their processes fork from a
preloaded python of the environment (`tests.preloaded_python`), which imports torch and the
framework once for the three. Where an example starts one process, it starts the interpreter."""


@pytest.fixture(scope="module")
def example_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("examples")
    proc = ServerProcess(sqlite_url(tmp / "bso.db"), cwd=tmp)
    yield proc
    proc.stop()


@pytest.mark.parametrize(
    ("script", "needs"),
    [
        ("plain_pytorch.py", "torch"),
        ("lightning_trainer.py", "lightning"),
        ("hf_trainer.py", "transformers"),
        ("accelerate_loop.py", "accelerate"),
        ("fabric_loop.py", "lightning"),
    ],
)
def test_example_runs_recurrences(
    example_server: ServerProcess,
    tmp_path: Path,
    environments: Environments,
    script: str,
    needs: str,
) -> None:
    pytest.importorskip(needs, reason=f"the example needs {needs}")
    requirement = documented_install(script)
    python = environments.python(requirement)
    if python != sys.executable:  # the environment has that install alone
        absent = (
            "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in sys.argv[1:]))"
        )
        alone = subprocess.run([python, "-c", absent, *OTHER_PARTS[requirement]], timeout=60)
        assert alone.returncode == 0, f"{requirement} brought another extra's packages"
    launcher = preloaded(python) if requirement in PRELOADED_ENVIRONMENTS else python
    command = [launcher, str(EXAMPLES / script), "--server", example_server.url]
    env = None
    if script in TWO_PROCESSES:  # the loop adapters on two processes, GPUs: NVML's test double
        env = environment([gpu(0), gpu(1)], MASTER_PORT=str(free_port()))
        if script == "accelerate_loop.py":  # under torchrun; Fabric's launcher starts its own
            command[:1] = [launcher, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}"]  # fmt: skip
        else:
            command += ["--devices", "2"]
    result = subprocess.run(
        [*command, "--recurrences", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    # Every run's line, on the console without any logging set up (stderr, or stdout where
    # the framework prints: accelerator.print, fabric.print).
    output = result.stdout + result.stderr
    # A recurrence that delivered no model says so, and the script exits 1: a scheduler sees it.
    missed = [line for line in output.splitlines() if line.endswith("delivered no model")]
    assert result.returncode == (1 if missed else 0), result.stderr[-3000:]
    lines = [line for line in output.splitlines() if line.startswith("zeus-bso: batch size")]
    assert len(lines) >= 2, output[-3000:]
    assert all(
        re.search(r"batch size \d+ (reached the target|stopped|ended) at epoch \d+ of \d+", line)
        for line in lines
    ), lines
    assert all("Next run: " in line for line in lines), lines
    if script in TWO_PROCESSES:
        two_processes(example_server, script, result.stdout)
    if script == "hf_trainer.py":
        # A learning curve: the default batch size reaches the target after a few epochs (it
        # reached it in the first, at accuracy 1.0, and no run could ever be stopped early).
        first = re.search(r"reached the target at epoch (\d+)", lines[0])
        assert first is not None, lines[0]
        assert int(first.group(1)) >= 2, lines[0]


def test_the_elastic_example_grows_within_its_bounds_and_prints_each_epoch(
    tmp_path: Path, environments: Environments
) -> None:
    """No server: one fit whose batch size the elastic chooses each epoch, in the environment
    its docstring installs (the Lightning extra alone)."""
    pytest.importorskip("lightning", reason="the example needs lightning")
    requirement = documented_install("elastic_lightning.py")
    python = environments.python(requirement)
    launcher = preloaded(python) if requirement in PRELOADED_ENVIRONMENTS else python
    result = subprocess.run(
        [launcher, str(EXAMPLES / "elastic_lightning.py"), "--epochs", "4"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    epochs = [line for line in result.stdout.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 4, result.stdout
    sizes = [int(re.search(r"batch size (\d+)", line)[1]) for line in epochs]  # type: ignore[index]
    assert sizes[0] == 32  # the initial size, as the first epoch trained it
    assert all(32 <= size <= 1024 for size in sizes)
    assert re.search(r"validation accuracy 0\.\d+ after 4 epochs", result.stdout)


def two_processes(server: ServerProcess, script: str, stdout: str) -> None:
    """A loop example on two processes: the main process alone prints (through the framework's
    print) and talks; one trial a recurrence for both processes, each GPU's energy once."""
    printed = [line for line in stdout.splitlines() if line.startswith("zeus-bso: ")]
    assert len(printed) == 2, stdout  # the main process's lines only
    with ServerClient(server.url) as client:
        (job,) = client.list_jobs(prefix=f"example-{TWO_PROCESSES[script]}")
        state = client.job_state(job.job_id)
    assert (state["job"]["number_of_gpus"], state["job"]["gpu_model"]) == (2, A100)
    assert state["job"]["max_power"] == pytest.approx(2 * LIMIT_W)
    assert len(state["trials"]) == 2  # one trial a recurrence, not one a process
    for trial in state["trials"]:
        assert trial["status"] == "reported"
        # Within 30%: on a loaded machine a rank may read its GPU some hundred milliseconds
        # after the barrier that lines the windows up (tests/integrations/test_topology.py).
        assert trial["energy"] / trial["time"] == pytest.approx(2 * WATTS, rel=0.3)


def test_every_examples_help_shows_its_whole_description(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--help`` showed the docstring's first line alone, cut mid-sentence ("... choose its
    batch size, recurrence after"): each example hands `arguments` its whole docstring, and
    ``--help`` shows it as written (its commands on lines of their own)."""
    import ast

    from tests.helpers import load_module

    common = load_module("examples_common", EXAMPLES / "_common.py")
    for script in sorted(EXAMPLES.glob("[!_]*.py")):
        tree = ast.parse(script.read_text())
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "arguments"
        ]
        assert calls, script.name
        assert all(getattr(call.args[0], "id", None) == "__doc__" for call in calls), script.name
        doc = ast.get_docstring(tree, clean=False)
        assert doc is not None
        monkeypatch.setattr(sys, "argv", [script.name, "--help"])
        with pytest.raises(SystemExit):
            common.arguments(doc)
        assert doc.strip() in capsys.readouterr().out, script.name


def test_the_examples_find_the_server_where_the_library_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The examples took ``--server http://127.0.0.1:8000`` unless told otherwise, so one run
    with ``$ZEUS_BSO_SERVER_URL`` set, as the library reads it, went to another server: the
    variable is their default now, and the local server the default without it."""
    from tests.helpers import load_module

    common = load_module("examples_common", EXAMPLES / "_common.py")
    monkeypatch.setattr(sys, "argv", ["plain_pytorch.py"])
    monkeypatch.delenv("ZEUS_BSO_SERVER_URL", raising=False)
    assert common.arguments(None).server == "http://127.0.0.1:8000"
    monkeypatch.setenv("ZEUS_BSO_SERVER_URL", "http://bso.internal:8000")
    assert common.arguments(None).server == "http://bso.internal:8000"
    monkeypatch.setattr(sys, "argv", ["plain_pytorch.py", "--server", "http://other:9000"])
    assert common.arguments(None).server == "http://other:9000"
