"""Each framework adapter, imported where its framework is not installed, says which install
brings it (the extra of the docs), instead of a bare ``ModuleNotFoundError`` from inside the
package. The framework is hidden from a fresh interpreter (``sys.modules[name] = None``, which
makes its import fail as an absent package's does)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE_AND_IMPORT = """
import sys
for name in {hidden!r}:
    sys.modules[name] = None
try:
    import {module}
except ImportError as err:
    print(err)
else:
    print("imported")
"""


@pytest.mark.parametrize(
    ("module", "hidden", "said"),
    [
        (
            "zeus_bso.integrations.accelerate",
            ["accelerate"],
            "ZeusBSOAccelerate needs Accelerate: pip install 'zeus-bso[accelerate]'",
        ),
        (
            "zeus_bso.integrations.fabric",
            ["lightning.fabric"],
            "ZeusBSOFabric needs Lightning Fabric: pip install 'zeus-bso[lightning]'",
        ),
        (
            "zeus_bso.integrations.huggingface",
            ["transformers"],
            "ZeusBSOTrainerCallback needs transformers: pip install 'zeus-bso[hf]'",
        ),
        (
            "zeus_bso.integrations.lightning",
            ["lightning.pytorch", "pytorch_lightning"],
            "ZeusBSOCallback needs PyTorch Lightning: pip install 'zeus-bso[lightning]'",
        ),
        (
            "zeus_bso.elastic.lightning",
            ["lightning.pytorch"],
            "ElasticBatchSizeCallback needs PyTorch Lightning: pip install 'zeus-bso[lightning]'",
        ),
    ],
)
def test_an_adapter_without_its_framework_names_the_install(
    module: str, hidden: list[str], said: str
) -> None:
    script = HIDE_AND_IMPORT.format(hidden=hidden, module=module)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == said
