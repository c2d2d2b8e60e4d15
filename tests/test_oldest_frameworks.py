"""The training extras' lower bounds (``lightning>=2.4``, ``transformers>=4.50``,
``accelerate>=1.1`` in pyproject.toml) are releases the callbacks run on, not numbers: the corpus
of real training scripts (``tests/scripts``) and the tests of the HF callback, the loop adapters
and the GPU check's parts run again in an environment that has exactly those releases (the rest of
the suite has the newest). Before these floors: Lightning 2.1 cannot load its own checkpoint under
torch 2.6's ``weights_only`` default, nor transformers 4.41-4.46 its RNG state, so a resumed run
failed there; Transformers 4's ``train()`` takes the batch size from its arguments again, its
evaluation passes no ``num_items_in_batch``, and Accelerate before 1.7 halves the batch under
``auto_find_batch_size`` (`tests.framework_versions` reads each off the installed release)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.environments import ROOT, TORCH_WHEELS, UV, Environments, oldest_supported, release
from tests.helpers import environment_without_settings

MODULES = (
    "tests/scripts/test_corpus.py",
    "tests/integrations/test_huggingface.py",
    "tests/integrations/test_hf_arguments.py",
    "tests/integrations/test_loop_adapters.py",
    "tests/integrations/test_gpu_check_parts.py",
    "tests/integrations/test_probe.py",
)


@pytest.mark.timeout(600)
def test_the_corpus_and_the_hf_callback_run_on_the_oldest_supported_frameworks(
    environments: Environments, tmp_path: Path
) -> None:
    if not UV.exists() or not TORCH_WHEELS:
        pytest.skip("needs uv beside this Python and the torch wheel, as scripts/test installs")
    python = environments.oldest()
    asked = (
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    )
    floors = oldest_supported()
    found = json.loads(subprocess.check_output([python, "-c", asked, *floors], text=True))
    assert {name: release(version) for name, version in found.items()} == {
        name: release(floor) for name, floor in floors.items()
    }
    # A run of its own: its own servers, cache folder and temporary files (its basetemp in this
    # test's, where it cannot take the numbered folders of the run around it), one process.
    env = {
        k: v
        for k, v in environment_without_settings().items()
        if not k.startswith(("PYTEST_", "COV_"))
    }
    options = ["-q", "-n", "0", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inner'}"]
    done = subprocess.run(
        [python, "-m", "pytest", *options, *MODULES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
