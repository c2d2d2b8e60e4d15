"""What a release ships: the wheel's metadata, licence and changelog, one version, and an
OpenAPI schema that changes only with a reviewed snapshot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers import SERVER_BIN
from zeus_bso import __version__

ROOT = Path(__file__).resolve().parents[1]


def test_the_openapi_schema_matches_its_committed_snapshot() -> None:
    served = subprocess.run(
        [SERVER_BIN, "openapi"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    snapshot = (ROOT / "docs" / "openapi.json").read_text()
    # The server reads the installed version (it imports nothing of the client's face): the one
    # written in __init__.py.
    assert json.loads(served)["info"]["version"] == __version__
    assert json.loads(served) == json.loads(snapshot), (
        "the server's OpenAPI schema changed: review the change, then record it with "
        "`zeus-bso-server openapi > docs/openapi.json`"
    )


def test_the_wheel_ships_licence_changelog_metadata_and_one_version(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
         "-w", str(tmp_path), str(ROOT)],
        check=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("zeus_bso-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"zeus_bso-{__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        licence = archive.read(f"{info}/licenses/LICENSE").decode()
        changelog = archive.read(f"{info}/extra_metadata/CHANGELOG.md").decode()
    assert f"zeus_bso-{__version__}-" in wheel.name  # the version of __init__.py, the one source
    assert f"\nVersion: {__version__}\n" in metadata
    assert "License-Expression: Apache-2.0" in metadata
    assert "Classifier: Programming Language :: Python :: 3.11" in metadata
    assert "Keywords:" in metadata
    assert "# zeus-bso" in metadata  # the README is the description
    assert "Apache License" in licence
    assert "Version 2.0, January 2004" in licence
    assert "## [0.1.0]" in changelog
    assert "zeus_bso_server/api/app.py" in names
    assert "zeus_bso/testing/gpu_double/pynvml.py" in names  # the NVML double the contracts ship


def test_the_readme_stays_a_short_front_door() -> None:
    """The README opens with the two commands and stays at most 150 lines; the manual is the
    documentation site (its pages exist where the README links them)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert first_block == [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[server]' && "
        ".venv/bin/zeus-bso-server serve",
        "scripts/test",
    ]
    generated = (ROOT / "docs" / "gen_reference.py").read_text()  # pages the build writes
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        page = link.removeprefix("docs/")
        assert (ROOT / link).is_file() or f'"{page}"' in generated, link


def test_the_committed_reference_pages_are_what_the_code_generates() -> None:
    """The command line, HTTP endpoint and policy option pages are generated from the code and
    committed (their links work where the repository is read): they must match it."""
    from tests.helpers import load_module

    generator = load_module("gen_reference", ROOT / "docs" / "gen_reference.py")
    for page, content in generator.COMMITTED.items():
        assert (ROOT / "docs" / page).read_text() == content(), (
            f"docs/{page} differs from the code: write it again with "
            "`.venv/bin/python docs/gen_reference.py`"
        )
