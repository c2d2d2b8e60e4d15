"""Cross-site requests, header by header, against a real server: what a browser sends for a page of
another origin changes nothing; what programs send (no browser headers) works as before.

``tests/api/test_browser.py`` makes the same attacks from a real page in Chromium."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.helpers import ServerProcess, job_body, sqlite_url, unique_id

TOKEN = "cross-site-token"


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """No token: the loopback default, where nothing but these checks stands in the way."""
    tmp = tmp_path_factory.mktemp("cross-site")
    proc = ServerProcess(sqlite_url(tmp / "bso.db"), cwd=tmp)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("cross-site-token")
    proc = ServerProcess(sqlite_url(tmp / "bso.db"), cwd=tmp, env={"ZEUS_BSO_TOKEN": TOKEN})
    yield proc
    proc.stop()


# What browsers send with a request made for a page: each a cross-origin one.
CROSS_SITE = {
    "another site": {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
    "another port of this host": {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"},
    "an <img> of another site": {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "image"},
    "an old browser, another origin": {"Origin": "http://127.0.0.1:1"},
    "a sandboxed frame": {"Origin": "null"},
}


def _forgeries(server: ServerProcess, job_id: str) -> list[httpx.Request]:
    """One request of each kind that changes state, aimed at ``job_id``."""
    base = server.url
    text = {"Content-Type": "text/plain"}
    report = {"job_id": job_id, "trial_number": 1, "batch_size": 64, "time": 0.001,
              "energy": 0.001, "metric": 0.99, "current_epoch": 1}  # fmt: skip
    return [
        httpx.Request("POST", base + "/jobs", json=job_body(unique_id("forged"))),
        httpx.Request("POST", base + "/jobs", content=json.dumps(job_body(job_id)), headers=text),
        httpx.Request(
            "GET",
            base + "/jobs/batch_size",
            params={
                "job_id": job_id,
                "gpu_model": "Forged GPU",
                "number_of_gpus": 1,
                "max_power": 100,
            },
        ),
        httpx.Request("POST", base + "/report", json=report),
        httpx.Request("PATCH", base + "/trials", json={"job_id": job_id, "trial_number": 1}),
        httpx.Request("DELETE", base + "/jobs", params={"job_id": job_id}),
        httpx.Request(
            "POST", base + "/api/trials/heartbeat", json={"job_id": job_id, "trial_number": 1}
        ),
    ]


def _state(client: httpx.Client, job_id: str) -> dict[str, object]:
    answer = client.get(f"/api/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    state: dict[str, object] = answer.json()
    return state


@pytest.mark.parametrize("which", ["open_server", "guarded"])
@pytest.mark.parametrize("kind", list(CROSS_SITE))
def test_a_cross_site_request_that_would_change_state_is_refused_and_changes_nothing(
    request: pytest.FixtureRequest, which: str, kind: str
) -> None:
    server: ServerProcess = request.getfixturevalue(which)
    # With a token, the browser attaches the dashboard's sign-in by itself: the forgery has it.
    auth = {"Authorization": f"Bearer {TOKEN}"} if which == "guarded" else {}
    with httpx.Client(base_url=server.url, headers=auth, timeout=30) as api:
        job_id = unique_id("victim")
        assert api.post("/jobs", json=job_body(job_id)).status_code == 201
        first = api.get("/jobs/batch_size", params={"job_id": job_id})
        assert first.status_code == 200
        before = _state(api, job_id)
        listed = len(api.get("/api/jobs").json())
        for forged in _forgeries(server, job_id):
            forged.headers.update(CROSS_SITE[kind] | auth)
            answer = api.send(forged)
            assert answer.status_code == 403, (forged.method, forged.url, answer.text)
            assert "cross-site request refused" in answer.json()["message"]
        assert _state(api, job_id) == before
        assert len(api.get("/api/jobs").json()) == listed


@pytest.mark.parametrize(
    "headers",
    [
        {},  # programs: our client, upstream Zeus's, curl
        {"Sec-Fetch-Site": "same-origin"},  # this server's own pages
        {"Sec-Fetch-Site": "none"},  # typed into the address bar
        {"Origin": "SAME"},  # an old browser on this server's own page
    ],
    ids=["program", "same-origin", "address-bar", "old-browser-same-origin"],
)
def test_programs_and_the_servers_own_pages_change_state_as_before(
    open_server: ServerProcess, headers: dict[str, str]
) -> None:
    if headers.get("Origin") == "SAME":
        headers = {"Origin": open_server.url}
    with httpx.Client(base_url=open_server.url, headers=headers, timeout=30) as api:
        job_id = unique_id("own")
        # Untyped and text/plain bodies from programs are still read as JSON (upstream's client).
        body = json.dumps(job_body(job_id))
        assert api.post("/jobs", content=body, headers={"Content-Type": ""}).status_code == 201
        trial = api.get("/jobs/batch_size", params={"job_id": job_id})
        assert trial.status_code == 200, trial.text
        report = {"job_id": job_id, "trial_number": trial.json()["trial_number"],
                  "batch_size": trial.json()["batch_size"],
                  "time": 10.0, "energy": 1000.0, "metric": 0.5, "current_epoch": 1}  # fmt: skip
        assert api.post("/report", json=report).status_code == 200
        assert api.delete("/jobs", params={"job_id": job_id}).status_code == 200


def test_reading_is_not_refused_across_sites(open_server: ServerProcess) -> None:
    """A browser keeps another site's page from reading the answer; the server need not refuse."""
    headers = CROSS_SITE["another site"]
    assert httpx.get(open_server.url + "/api/jobs", headers=headers).status_code == 200
    assert httpx.get(open_server.url + "/dashboard", headers=headers).status_code == 200


def test_the_dashboards_basic_sign_in_opens_the_pages_only(guarded: ServerProcess) -> None:
    """A browser re-sends Basic credentials by itself; bearer tokens only when a script asks."""
    basic = ("anyone", TOKEN)
    for page in ("/dashboard", "/docs", "/openapi.json"):  # the API docs the dashboard links
        assert httpx.get(guarded.url + page, auth=basic).status_code == 200, page
    for method, path in [("GET", "/api/jobs"), ("GET", "/jobs/batch_size?job_id=x"),
                         ("POST", "/jobs"), ("GET", "/metrics")]:  # fmt: skip
        answer = httpx.request(method, guarded.url + path, auth=basic, json=job_body())
        assert answer.status_code == 401, (method, path)
        assert (
            "Basic credentials are taken by the dashboard's pages only" in answer.json()["message"]
        )
        assert answer.headers["www-authenticate"] == "Bearer"


def test_the_host_header_is_what_an_old_browsers_origin_is_checked_against(
    open_server: ServerProcess,
) -> None:
    # The same origin by another name (localhost for 127.0.0.1) is another origin to a browser.
    other_name = open_server.url.replace("127.0.0.1", "localhost")
    answer = httpx.post(
        open_server.url + "/jobs", json=job_body(unique_id()), headers={"Origin": other_name}
    )
    assert answer.status_code == 403
    assert other_name in answer.json()["message"]
