"""The dashboard in a real browser: Chromium, driven by Playwright, against a real server with a
token and real jobs. The browser signs in with HTTP Basic auth (the token as the password)."""

from __future__ import annotations

import http.server
import itertools
import json
import math
import os
import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers import (
    ServerProcess,
    job_body,
    metric,
    run_one,
    run_recurrences,
    sqlite_url,
    unique_id,
)
from tests.ports import CHROMIUM_SOCKET, socket_environment
from zeus_bso.units import energy_text
from zeus_bso_server.api.charts import number

CHROMIUM = (
    os.environ.get("ZEUS_BSO_CHROMIUM")
    or shutil.which("chromium")
    or shutil.which("chromium-browser")
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium: apt-get install chromium (.ci/run does), or set ZEUS_BSO_CHROMIUM",
)

TOKEN = "browser-token-value"

if CHROMIUM is not None:
    from playwright.sync_api import Browser, Page, Response, sync_playwright
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect as playwright_expect


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("browser")
    proc = ServerProcess(sqlite_url(tmp / "bso.db"), cwd=tmp, env={"ZEUS_BSO_TOKEN": TOKEN})
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    with sync_playwright() as playwright:
        environment = socket_environment(CHROMIUM_SOCKET)
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, env=environment)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page of a browser signed in with the token."""
    context = browser.new_context(http_credentials={"username": "me", "password": TOKEN})
    yield context.new_page()
    context.close()


def _job_with_runs(api: httpx.Client, recurrences: int) -> dict[str, Any]:
    job_id = unique_id("browser")
    body = job_body(job_id, prefix=job_id, batch_sizes=[32, 64, 128], default_batch_size=64)
    assert api.post("/jobs", json=body | {"max_epochs": 3}).status_code == 201
    run_recurrences(api, job_id, recurrences)
    state: dict[str, Any] = api.get(f"/api/jobs/{job_id}").json()
    return state


def test_signing_in_takes_the_token_as_the_password(
    browser: Browser, server: ServerProcess
) -> None:
    # No credentials: the server's 401 asks for Basic auth; the headless browser, with nothing
    # to answer, gives up.
    context = browser.new_context()
    page = context.new_page()
    answers: list[Response] = []
    page.on("response", lambda answer: answers.append(answer))
    with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
        page.goto(server.url + "/dashboard")
    assert [answer.status for answer in answers] == [401]
    assert answers[0].headers["www-authenticate"].startswith("Basic")
    context.close()
    # A wrong password: refused, with the reason.
    context = browser.new_context(http_credentials={"username": "me", "password": "wrong"})
    page = context.new_page()
    response = page.goto(server.url + "/dashboard")
    assert response is not None
    assert response.status == 401
    playwright_expect(page.locator("body")).to_contain_text("token")
    context.close()
    # The token as the password, under any user name: signed in.
    context = browser.new_context(http_credentials={"username": "anyone", "password": TOKEN})
    page = context.new_page()
    response = page.goto(server.url + "/dashboard")
    assert response is not None
    assert response.status == 200
    playwright_expect(page.locator("h1")).to_have_text("Jobs")
    context.close()


def test_the_job_list_shows_gpu_recommendation_and_savings_and_links_the_job(
    page: Page, api: httpx.Client, server: ServerProcess
) -> None:
    state = _job_with_runs(api, 10)
    job_id = state["job"]["job_id"]
    assert state["recommended"] is not None
    assert state["savings"] is not None
    page.goto(server.url + "/dashboard?prefix=" + job_id)
    rows = page.locator("#jobs tbody tr")
    playwright_expect(rows).to_have_count(1)
    row = rows.first
    gpus = f"1 \N{MULTIPLICATION SIGN} {state['job']['gpu_model']}"
    playwright_expect(row.locator("td").nth(1)).to_have_text(gpus)
    playwright_expect(row.locator(".recommended")).to_have_text(
        str(state["recommended"]["batch_size"])
    )
    saved = round(100 * state["savings"]["fraction"], 1)
    playwright_expect(row.locator(".savings")).to_contain_text(f"{saved}% of cost")
    row.get_by_role("link", name=job_id).click()
    playwright_expect(page.locator("h1")).to_have_text(job_id)


def test_the_job_list_pages_forward_and_back(
    page: Page, api: httpx.Client, server: ServerProcess
) -> None:
    prefix = unique_id("pages")
    for index in range(55):  # more than a page of 50
        job_id = f"{prefix}-{index:02d}"
        assert api.post("/jobs", json=job_body(job_id, prefix=prefix)).status_code == 201
    page.goto(server.url + "/dashboard?prefix=" + prefix)
    rows = page.locator("#jobs tbody tr")
    playwright_expect(rows).to_have_count(50)
    page.get_by_role("link", name="next →").click()
    playwright_expect(rows).to_have_count(5)
    playwright_expect(rows.last.locator("td").first).to_have_text(f"{prefix}-54")
    playwright_expect(page.get_by_role("link", name="next →")).to_have_count(0)
    page.get_by_role("link", name="← previous").click()
    playwright_expect(rows).to_have_count(50)
    playwright_expect(rows.first.locator("td").first).to_have_text(f"{prefix}-00")


def test_an_unknown_job_is_a_404_page(page: Page, server: ServerProcess) -> None:
    response = page.goto(server.url + "/dashboard/jobs/no-such-job")
    assert response is not None
    assert response.status == 404
    playwright_expect(page.locator("h1")).to_have_text("No such job")
    page.get_by_role("link", name="All jobs").click()
    playwright_expect(page.locator("h1")).to_have_text("Jobs")


def test_the_job_page_shows_recommendation_savings_posterior_and_the_runs_chart(
    page: Page, api: httpx.Client, server: ServerProcess
) -> None:
    state = _job_with_runs(api, 12)
    job_id = state["job"]["job_id"]
    page.goto(server.url + "/dashboard/jobs/" + job_id)

    recommended = state["recommended"]
    playwright_expect(page.locator("#recommended strong")).to_have_text(
        str(recommended["batch_size"])
    )
    playwright_expect(page.locator("#recommended")).to_contain_text("lowest posterior mean cost")
    savings = state["savings"]
    shown = f"{round(100 * abs(savings['fraction']), 1)}%"
    playwright_expect(page.locator("#savings strong")).to_have_text(shown)
    playwright_expect(page.locator("#savings")).to_contain_text(
        f"for the {savings['runs']} models delivered"
    )

    # The posterior column shows each arm's posterior mean cost and std, as the API gives them.
    for size in state["batch_sizes"]:
        cell = page.locator(f'#batch-sizes tr[data-batch-size="{size["batch_size"]}"] .posterior')
        if size["posterior_mean_reward"] is None:
            playwright_expect(cell).to_have_text("")
            continue
        text = cell.inner_text()
        mean, std = (float(part.replace(",", "")) for part in text.split(" ± "))
        assert mean == pytest.approx(-size["posterior_mean_reward"], rel=1e-3)
        assert std == pytest.approx(size["posterior_std"], rel=1e-3, abs=1e-9)

    # One point per reported run, carrying its trial's cost; higher costs drawn higher.
    reported = {t["trial_number"]: t for t in state["trials"] if t["cost"] is not None}
    points = page.locator("#cost-chart circle.point")
    playwright_expect(points).to_have_count(len(reported))
    chart_box = page.locator("#cost-chart").bounding_box()
    assert chart_box is not None
    drawn: list[tuple[float, float]] = []
    for index in range(points.count()):
        point = points.nth(index)
        trial = reported[int(point.get_attribute("data-trial") or 0)]
        assert float(point.get_attribute("data-cost") or "nan") == pytest.approx(trial["cost"])
        assert int(point.get_attribute("data-batch-size") or 0) == trial["batch_size"]
        box = point.bounding_box()
        assert box is not None
        assert chart_box["x"] <= box["x"]
        assert box["x"] + box["width"] <= chart_box["x"] + chart_box["width"]
        assert chart_box["y"] <= box["y"]
        assert box["y"] + box["height"] <= chart_box["y"] + chart_box["height"]
        drawn.append((trial["cost"], box["y"]))
    cheapest, dearest = min(drawn), max(drawn)
    assert dearest[0] > cheapest[0]
    assert dearest[1] < cheapest[1]

    # Labelled axes, and the default's and the recommendation's levels.
    playwright_expect(page.locator("#cost-chart").get_by_text("trial number")).to_be_visible()
    playwright_expect(page.locator("#cost-chart").get_by_text("cost (J)")).to_be_visible()
    first, last = min(reported), max(reported)
    x_labels = page.locator("#cost-chart text.x-tick").all_text_contents()
    assert x_labels[0] == str(first)
    assert x_labels[-1] == str(last)
    y_ticks = page.locator("#cost-chart text.y-tick").all_text_contents()
    y_labels = [float(v.replace(",", "")) for v in y_ticks]
    assert 3 <= len(y_labels) <= 7
    assert y_labels == sorted(y_labels)  # from the bottom of the axis up
    steps = {round(b - a, 9) for a, b in itertools.pairwise(y_labels)}
    assert len(steps) == 1  # evenly spaced, round values (charts.round_ticks)
    levels = page.locator("#cost-chart line.level")
    names = [levels.nth(i).get_attribute("data-level") for i in range(levels.count())]
    default_sizes = [b for b in state["batch_sizes"] if b["batch_size"] == 64]
    assert default_sizes[0]["mean_cost"] is not None
    if recommended["batch_size"] == 64:
        assert names == ["default", "default, recommended"]
    else:
        assert names == ["default", "recommended"]
    labels = page.locator("#cost-chart text.level-label").all_text_contents()
    assert labels[0].startswith("default 64:")
    assert labels[-1].endswith(f"{recommended['batch_size']}: " + labels[-1].split(": ")[1])
    assert all(math.isfinite(float(label.split(": ")[1].replace(",", ""))) for label in labels)


def test_the_default_and_the_recommendation_at_one_cost_keep_their_labels_apart(
    page: Page, api: httpx.Client, server: ServerProcess
) -> None:
    job_id = unique_id("levels")
    body = job_body(job_id, batch_sizes=[64], default_batch_size=64, eta_knob=1.0)
    assert api.post("/jobs", json=body).status_code == 201
    for _ in range(3):  # every run costs 100 J: the default's mean and the expected cost agree
        trial = api.get("/jobs/batch_size", params={"job_id": job_id}).json()
        report = trial | {"time": 1.0, "energy": 100.0, "metric": 0.9, "current_epoch": 1}
        assert api.post("/report", json=report).json()["converged"]
        assert api.patch("/trials", json=trial).status_code == 200
    page.goto(server.url + "/dashboard/jobs/" + job_id)
    lines = page.locator("#cost-chart line.level")
    assert lines.count() == 2
    assert lines.nth(0).get_attribute("y1") == lines.nth(1).get_attribute("y1")
    texts = page.locator("#cost-chart text.level-label")
    first, second = (texts.nth(i).bounding_box() for i in range(2))
    assert first is not None
    assert second is not None
    above, below = sorted((first, second), key=lambda box: box["y"])
    assert above["y"] + above["height"] <= below["y"]


ATTACK_PAGE = """<!doctype html>
<html><head><title>loading</title></head><body>
<iframe name="sink"></iframe>
<form id="form" method="POST" enctype="text/plain" action="{target}/jobs" target="sink">
<input name='{form_head}' value='{form_tail}'>
</form>
<script>
const target = {target_json};
const waits = [];
// An image: GET /jobs/batch_size starts a trial and registers a hardware profile.
waits.push(new Promise((done) => {{
  const image = new Image();
  image.onload = image.onerror = done;
  image.src = target + "/jobs/batch_size?" + new URLSearchParams({profile_query});
}}));
// fetch without CORS: an untyped body (a Blob with no type) and a text/plain one.
for (const [path, body] of [["/jobs", new Blob([{forged_job}])], ["/report", {forged_report}]]) {{
  waits.push(fetch(target + path, {{method: "POST", mode: "no-cors", credentials: "include",
                                    body}}).catch(() => null));
}}
// A form with a text/plain body, which reads as JSON: name + "=" + value.
waits.push(new Promise((done) => {{
  const sink = document.querySelector("iframe");
  sink.addEventListener("load", done);
  document.getElementById("form").submit();
}}));
Promise.all(waits).then(() => {{ document.title = "done"; }});
</script>
</body></html>
"""


class _AttackSite:
    """A page of another origin (another port of this host), served by a real HTTP server."""

    def __init__(self, html: str) -> None:
        body = html.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/attack.html"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _refused(api: httpx.Client) -> float:
    """Requests the server refused with 403 before routing them."""
    return metric(
        api.get("/metrics").text, "zeus_bso_http_requests_total", route="unmatched", status="403"
    )


def _attack(page: Page, target: str, victim: str, forged: str) -> None:
    """Opens another origin's page that tries every request a page can send without a preflight:
    register a job (form, untyped fetch), start a trial on new GPUs (image), report a
    near-zero-cost converged run (text/plain fetch)."""
    job = job_body(forged)
    text = json.dumps(job)
    cut = text.index('"job_id": "') + len('"job_id": "') + len(forged) // 2
    report = {"job_id": victim, "trial_number": 1, "batch_size": 64, "time": 0.001,
              "energy": 0.001, "metric": 0.99, "current_epoch": 1}  # fmt: skip
    profile = {"job_id": victim, "gpu_model": "Forged GPU", "number_of_gpus": "1",
               "max_power": "100"}  # fmt: skip
    html = ATTACK_PAGE.format(
        target=target,
        target_json=json.dumps(target),
        # The form sends name + "=" + value: the job id gets an "=" in its middle.
        form_head=text[:cut].replace("'", "&#39;"),
        form_tail=text[cut:].replace("'", "&#39;"),
        profile_query=json.dumps(profile),
        forged_job=json.dumps(json.dumps(job_body(forged + "-blob"))),
        forged_report=json.dumps(json.dumps(report)),
    )
    site = _AttackSite(html)
    try:
        page.goto(site.url)
        playwright_expect(page).to_have_title("done", timeout=15_000)
    finally:
        site.close()


@pytest.mark.parametrize("signed_in", [True, False], ids=["token-signed-in", "no-token"])
def test_a_page_of_another_origin_changes_nothing(
    browser: Browser,
    server: ServerProcess,
    api: httpx.Client,
    tmp_path_factory: pytest.TempPathFactory,
    signed_in: bool,
) -> None:
    """Every request a page of another origin can make a browser send without a preflight, with
    the dashboard's sign-in attached where there is one: each reaches the server and is refused
    (403), and nothing is stored. The dashboard, signed in, keeps working."""
    if signed_in:
        target, client = server, api
        # Signed in to the dashboard, the browser attaches the sign-in to later requests to the
        # server by itself, those another site's page makes it send included.
        context = browser.new_context(http_credentials={"username": "me", "password": TOKEN})
        signed = context.new_page().goto(server.url + "/dashboard")
        assert signed is not None
        assert signed.status == 200
    else:
        target = ServerProcess(
            sqlite_url(tmp_path_factory.mktemp("open") / "bso.db"),
            cwd=tmp_path_factory.getbasetemp(),
        )
        client = httpx.Client(base_url=target.url, timeout=30.0)
        context = browser.new_context()
    try:
        victim = unique_id("victim")
        assert client.post("/jobs", json=job_body(victim)).status_code == 201
        assert client.get("/jobs/batch_size", params={"job_id": victim}).status_code == 200
        before = client.get(f"/api/jobs/{victim}").json()
        refused = _refused(client)
        forged = unique_id("forged")
        page = context.new_page()
        _attack(page, target.url, victim, forged)
        # All four requests arrived and were refused (polled: a no-cors answer is opaque).
        deadline = time.monotonic() + 10
        while _refused(client) < refused + 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _refused(client) == refused + 4
        assert client.get(f"/api/jobs/{victim}").json() == before
        listed = {job["job_id"] for job in client.get("/api/jobs", params={"limit": 1000}).json()}
        assert not {job_id for job_id in listed if job_id.startswith(forged)}
        if signed_in:
            shown = page.goto(server.url + f"/dashboard/jobs/{victim}")
            assert shown is not None
            assert shown.status == 200
            playwright_expect(page.locator("h1")).to_have_text(victim)
    finally:
        context.close()
        if not signed_in:
            client.close()
            target.stop()


def test_the_job_list_sums_up_every_jobs_spending_and_savings(
    page: Page, api: httpx.Client, server: ServerProcess
) -> None:
    prefix = unique_id("fleet")
    states = []
    for name, recurrences in (("a", 8), ("b", 6), ("c", 0)):
        job_id = f"{prefix}-{name}"
        body = job_body(job_id, prefix=prefix, batch_sizes=[32, 64, 128], default_batch_size=64)
        assert api.post("/jobs", json=body | {"max_epochs": 3}).status_code == 201
        run_recurrences(api, job_id, recurrences)
        states.append(api.get(f"/api/jobs/{job_id}").json())
    ended = [t for s in states for t in s["trials"] if t["status"] not in ("dispatched", "running")]
    spent = sum(t["energy"] or 0.0 for t in ended)
    known = [s for s in states if s["savings"] is not None]
    assert len(known) == 2  # the job without runs has no savings
    saved = sum(s["savings"]["energy"] for s in known)
    spent_known = sum(
        t["energy"] or 0.0
        for s in known
        for t in s["trials"]
        if t["status"] not in ("dispatched", "running")
    )

    page.goto(server.url + "/dashboard?prefix=" + prefix)
    fleet = page.locator("#fleet")
    playwright_expect(fleet).to_contain_text("3 jobs")
    playwright_expect(fleet.locator(".runs")).to_have_text(str(len(ended)))
    # In the unit a run's line uses (these test runs spend some kJ), the joules in the tooltip.
    playwright_expect(fleet.locator(".energy")).to_have_text(energy_text(spent))
    playwright_expect(fleet.locator(".energy")).to_have_attribute("title", f"{number(spent)} J")
    playwright_expect(fleet.locator(".energy-saved")).to_have_text(energy_text(saved))
    percent = round(100 * saved / (saved + spent_known), 1)
    playwright_expect(fleet.locator(".energy-saved-percent")).to_have_text(f"{percent}%")
    saving = sum(s["savings"]["cost"] >= 0 for s in known)
    playwright_expect(fleet).to_contain_text(
        f"the 2 jobs whose savings are known ({saving} saved, {2 - saving} spent more) together"
    )
    # One verb where the energy and the cost went the same way ("saved 4 kJ (..) and 12% of
    # the cost"), a second where they did not.
    totals = api.get("/api/summary", params={"prefix": prefix}).json()
    agree = (totals["energy_saved"] >= 0) == (totals["cost_saved"] >= 0)
    said = fleet.inner_text()
    assert (") and saved " in said or ") and spent " in said) is not agree, said
    # Each job's own saving, in the same unit.
    row = page.locator("#jobs tbody tr", has_text=f"{prefix}-a")
    energy = states[0]["savings"]["energy"]
    playwright_expect(row.locator(".savings")).to_contain_text(energy_text(abs(energy)))


def test_savings_count_unconverged_runs_and_a_blocked_job_says_so(
    page: Page, api: httpx.Client, server: ServerProcess
) -> None:
    """A run that did not converge delivered nothing: the job that paid for it spent more than
    its default would have, and says "more", not a negative saving. A default that never
    converged leaves no figure, and a job where nothing converges is blocked."""
    prefix = unique_id("honest")
    job_id = f"{prefix}-a"
    body = job_body(job_id, prefix=prefix, batch_sizes=[32, 64], default_batch_size=64)
    body |= {"target_metric": 0.8, "max_epochs": 2, "learning_curve_stop": False}
    assert api.post("/jobs", json=body).status_code == 201
    run_one(api, job_id, {64: 0.9})
    run_one(api, job_id, {64: 0.9}, energy=400.0)  # 32: unconverged
    savings = api.get(f"/api/jobs/{job_id}").json()["savings"]
    assert savings["fraction"] < 0
    page.goto(server.url + "/dashboard/jobs/" + job_id)
    shown = f"{round(-100 * savings['fraction'], 1)}%"
    playwright_expect(page.locator("#savings strong")).to_have_text(shown)
    playwright_expect(page.locator("#savings")).to_contain_text("more cost than the default")
    playwright_expect(page.locator("#savings")).to_contain_text("for the 1 model delivered")
    playwright_expect(page.locator("#savings")).not_to_contain_text("-")

    blocked = f"{prefix}-b"
    body = job_body(blocked, prefix=prefix, batch_sizes=[32, 64], default_batch_size=64)
    body |= {"target_metric": 0.8, "max_epochs": 2, "learning_curve_stop": False}
    assert api.post("/jobs", json=body).status_code == 201
    run_one(api, blocked, {})
    run_one(api, blocked, {})
    page.goto(server.url + "/dashboard/jobs/" + blocked)
    playwright_expect(page.locator(".badge").first).to_have_text("blocked")
    # Marked apart from the stages that go on (red, as a failed trial's status).
    playwright_expect(page.locator(".badge").first).to_have_css(
        "background-color", "rgb(251, 231, 231)"
    )
    playwright_expect(page.locator("#next-run")).to_contain_text("refused")
    playwright_expect(page.locator("#next-run")).to_contain_text("lower target_metric")
    playwright_expect(page.locator("#savings")).to_contain_text(
        "the default batch size (64) never converged"
    )

    page.goto(server.url + "/dashboard?prefix=" + prefix)
    fleet = page.locator("#fleet")
    playwright_expect(fleet).to_contain_text(
        "the 1 job whose savings are known (0 saved, 1 spent more) together spent"
    )
    playwright_expect(fleet).to_contain_text("more energy")
    row = page.locator("#jobs tbody tr", has_text=job_id)
    playwright_expect(row.locator(".savings")).to_contain_text("more cost")
