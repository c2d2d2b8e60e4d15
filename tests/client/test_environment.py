"""The client's settings from the environment are read without the white space around them: a
value from a Kubernetes secret or ConfigMap written with ``echo`` ends in a line break."""

from __future__ import annotations

from pathlib import Path

import pytest

from zeus_bso.client.fallback import cache_dir
from zeus_bso.client.job_ids import run_key_from_environment
from zeus_bso.options import server_url_from, token_from


def test_settings_with_a_line_break_are_read_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", f"{tmp_path}\n")  # was a folder named with it
    monkeypatch.setenv("ZEUS_BSO_RUN_KEY", "nightly-42\n")  # was a run key the server refused
    monkeypatch.setenv("ZEUS_BSO_SERVER_URL", " http://zeus-bso.corp:8000\n")
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    monkeypatch.setenv("ZEUS_BSO_TOKEN_FILE", f"{token}\n")
    assert cache_dir() == tmp_path
    assert run_key_from_environment() == "nightly-42"
    assert server_url_from(None) == "http://zeus-bso.corp:8000"
    assert token_from(None) == "s3cret"
