"""The dashboard's HTML pages, against a real server process."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import escape as html_escape
from urllib.parse import quote

import httpx
import pytest

from tests.helpers import ServerProcess, job_body, run_recurrences, sqlite_url, unique_id
from zeus_bso.units import percent_text
from zeus_bso_server.api.charts import cost_chart, round_ticks, sparkline
from zeus_bso_server.read_models import TrialView

NEW_SERVERS_LIST: list[str] = []
"""The job list of the module's server as it started, read before any test registers a job
(whichever test of the module runs first: any order, any worker)."""


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    tmp = tmp_path_factory.mktemp("dashboard")
    server = ServerProcess(sqlite_url(tmp / "bso.db"), cwd=tmp)
    with server.client() as client:
        NEW_SERVERS_LIST[:] = [client.get("/dashboard/jobs/", follow_redirects=True).text]
        yield client
    server.stop()


def test_the_home_page_leads_to_the_job_list(http: httpx.Client) -> None:
    home = http.get("/", follow_redirects=False)
    assert home.status_code == 307
    assert home.headers["location"].endswith("/dashboard")
    # So does a job's address without the job (it answered a JSON validation error).
    for path in ("/dashboard/jobs", "/dashboard/jobs/"):
        there = http.get(path, follow_redirects=False)
        assert there.status_code == 307, path
        assert there.headers["location"] == "/dashboard", path
    page = http.get("/dashboard/jobs/", follow_redirects=True)
    assert page.headers["content-type"].startswith("text/html")
    # A new server's empty list says how a job gets there, not "No jobs." alone.
    (empty,) = NEW_SERVERS_LIST
    assert "No jobs yet: a training script registers its job the first time" in empty
    assert 'href="/docs"' in empty


def test_the_job_list_links_every_job_and_escapes_ids(http: httpx.Client) -> None:
    prefix = unique_id("dash")
    ids = [f"{prefix}-plain", f"{prefix}-<script>alert(1)</script>"]
    for job_id in ids:
        assert http.post("/jobs", json=job_body(job_id, prefix=prefix)).status_code == 201
    page = http.get("/dashboard", params={"prefix": prefix})
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    links = re.findall(r'href="([^"]*/dashboard/jobs/[^"]*)"', html)
    assert len(links) == 2
    for link in links:  # each link opens its job's page
        assert http.get(link).status_code == 200
    other = http.get("/dashboard", params={"prefix": prefix + "-nothing"})
    assert "No jobs whose id starts with" in other.text


def test_the_job_list_pages(http: httpx.Client) -> None:
    prefix = unique_id("many")
    for index in range(55):  # more than a page of 50
        job_id = f"{prefix}-{index:02d}"
        assert http.post("/jobs", json=job_body(job_id, prefix=prefix)).status_code == 201
    first = http.get("/dashboard", params={"prefix": prefix}).text
    assert first.count("/dashboard/jobs/") == 50
    next_link = re.search(r'href="([^"]*)">next', first)
    assert next_link is not None
    second = http.get(next_link.group(1).replace("&amp;", "&")).text
    assert second.count("/dashboard/jobs/") == 5
    assert f"{prefix}-54" in second
    assert "next" not in second.split("</table>")[1]


def test_a_job_page_shows_its_batch_sizes_chart_and_trials(http: httpx.Client) -> None:
    job_id = unique_id("shown")
    assert http.post("/jobs", json=job_body(job_id, max_epochs=3)).status_code == 201
    trials = run_recurrences(http, job_id, 6)
    page = http.get("/dashboard/jobs/" + quote(job_id, safe=""))
    assert page.status_code == 200
    html = page.text
    state = http.get(f"/api/jobs/{job_id}").json()
    assert f"{state['trial_count']} trials" in html
    for size in state["batch_sizes"]:
        assert f'<td class="num">{size["batch_size"]}</td>' in html
    reported = [t for t in state["trials"] if t["cost"] is not None]
    assert html.count("<circle") == len(reported) > 0
    rows = re.findall(r'<tr>\s*<td class="num">(\d+)</td>', html.split("Trials, newest first")[1])
    assert [int(n) for n in rows] == [t["trial_number"] for t in reversed(trials)]
    rounds = {t["round"] for t in state["trials"] if t["kind"] == "exploration"}
    assert rounds
    assert None not in rounds
    for stored in rounds:  # counted from 1, as the next run's words count them
        assert f"exploration (round {stored + 1})" in html
    assert "(round 0)" not in html
    if state["best_batch_size"] is not None:
        assert f"{state['best_batch_size']} (the mean of its converged runs" in html


def test_a_job_page_links_the_other_jobs_of_its_prefix_and_how_they_differ(
    http: httpx.Client,
) -> None:
    prefix = unique_id("sib").replace("-", "")
    first, second = f"{prefix}-aaaa", f"{prefix}-bbbb<i>"
    assert http.post("/jobs", json=job_body(first, prefix=prefix)).status_code == 201
    changed = job_body(second, prefix=prefix, target_metric=0.9, max_epochs=7)
    assert http.post("/jobs", json=changed).status_code == 201
    html = http.get("/dashboard/jobs/" + quote(second, safe="")).text
    (siblings,) = re.findall(r'<dd id="siblings">(.*?)</dd>', html)
    assert f'<a href="/dashboard/jobs/{first}">{first}</a> (0 trials;' in siblings
    assert "target_metric 0.5 there, 0.9 here, max_epochs 100 there, 7 here" in siblings
    assert "learn apart" not in siblings
    back = http.get("/dashboard/jobs/" + quote(first, safe="")).text
    (listed,) = re.findall(r'<dd id="siblings">(.*?)</dd>', back)
    assert "bbbb&lt;i&gt;" in listed  # escaped
    assert f'href="/dashboard/jobs/{quote(second, safe="")}"' in listed
    # The same settings under another id (upstream's client draws one at every registration).
    twin = f"{prefix}-cccc"
    assert http.post("/jobs", json=job_body(twin, prefix=prefix)).status_code == 201
    (same,) = re.findall(r'<dd id="siblings">(.*?)</dd>', http.get(f"/dashboard/jobs/{twin}").text)
    assert f"{first}</a> (0 trials; last change" in same
    assert "the same settings" in same
    assert "learn apart (upstream Zeus's client draws a new id" in same
    lone = unique_id("lone")
    assert http.post("/jobs", json=job_body(lone)).status_code == 201
    assert 'id="siblings"' not in http.get(f"/dashboard/jobs/{lone}").text


def test_an_unknown_job_is_a_404_page(http: httpx.Client) -> None:
    page = http.get("/dashboard/jobs/no-such-job")
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "No job has the id “no-such-job”" in page.text
    assert http.get("/dashboard", params={"offset": -1}).status_code == 422


def test_the_cost_chart_scales_into_its_box() -> None:
    def trial(number: int, cost: float | None, converged: bool = True) -> TrialView:
        return TrialView(
            job_id="j", trial_number=number, batch_size=32, kind="exploration", round=0,
            status="reported", epochs=1, time=1.0, energy=1.0, metric=1.0, cost=cost,
            converged=converged, message=None, created_at=0.0, updated_at=0.0,
            lease_expires_at=None,
        )  # fmt: skip

    chart = cost_chart([trial(3, 50.0), trial(1, 10.0), trial(2, None), trial(5, 30.0, False)])
    assert [p.trial_number for p in chart.points] == [1, 3, 5]
    assert (chart.low, chart.high) == (10.0, 50.0)
    inner_left, inner_right = chart.left + 8, chart.right - 8
    inner_top, inner_bottom = chart.top + 8, chart.bottom - 8
    xs = [p.x for p in chart.points]
    ys = {p.trial_number: p.y for p in chart.points}
    assert xs == [inner_left, (inner_left + inner_right) / 2, inner_right]
    assert ys[1] == inner_bottom  # the cheapest run at the bottom
    assert ys[3] == inner_top
    assert ys[5] == (inner_top + inner_bottom) / 2
    assert not chart.points[2].converged
    # Labelled axes: every trial number from first to last, costs from low to high.
    assert [t.label for t in chart.x_ticks] == ["1", "2", "3", "4", "5"]
    assert [t.label for t in chart.y_ticks] == ["10", "20", "30", "40", "50"]
    assert [t.at for t in chart.y_ticks][::2] == [ys[1], ys[5], ys[3]]

    # The cost axis is labelled at round values, wherever its ends fall (it read "28.22, 33.39,
    # 38.56, 43.73, 48.9").
    uneven = cost_chart([trial(1, 28.22), trial(2, 48.9)])
    assert [t.label for t in uneven.y_ticks] == ["30", "35", "40", "45"]
    assert [round_ticks(0.1, 0.35), round_ticks(1234.0, 98765.0)] == [
        [0.1, 0.15, 0.2, 0.25, 0.3],
        [20000.0, 40000.0, 60000.0, 80000.0],
    ]
    assert round_ticks(7.0, 7.0) == [7.0]  # one cost: one label

    # A level beyond the runs' costs widens the cost axis to hold it.
    levelled = cost_chart([trial(1, 10.0), trial(2, 30.0)], {"default": (64, 70.0)})
    assert (levelled.low, levelled.high) == (10.0, 70.0)
    (level,) = levelled.levels
    assert (level.name, level.batch_size, level.y) == ("default", 64, inner_top)

    one = cost_chart([trial(7, 5.0)])
    middle = ((inner_left + inner_right) / 2, (inner_top + inner_bottom) / 2)
    assert (one.points[0].x, one.points[0].y) == middle  # a single point sits centred
    assert cost_chart([trial(1, None)]).points == []


def test_the_pages_need_no_network() -> None:
    """Templates ship inside the package: no CDN, no script."""
    from importlib.resources import files

    for page in (files("zeus_bso_server.api") / "templates").iterdir():
        text = page.read_text()
        assert "<script" not in text
        assert "http://" not in text
        assert "https://" not in text


def test_the_api_docs_it_links_load_nothing_from_another_site(http: httpx.Client) -> None:
    """Swagger UI and ReDoc come from the server itself, not a CDN: they work on a cluster
    without a way out, as the dashboard does."""
    dashboard = http.get("/dashboard").text
    assert 'href="/docs"' in dashboard
    for page in ("/docs", "/redoc"):
        text = http.get(page).text
        assert "http://" not in text
        assert "https://" not in text
        loaded = re.findall(r"""(?:href|src|url)[=:] ?["']([^"']+)["']""", text)
        assert len(loaded) >= 2, (page, loaded)  # its script and the schema, at least
        for url in loaded:
            assert url.startswith("/"), (page, url)
            answer = http.get(url)
            assert answer.status_code == 200, (page, url)
            assert answer.content, (page, url)


def test_a_trials_message_writes_its_figures_as_people_read_them(http: httpx.Client) -> None:
    """Upstream's words carry costs as Python writes floats ("min_cost(4000.1234567)"), and
    the message column ran past the page's edge; the page writes them as its other figures,
    the whole message in the cell's tooltip."""
    job_id = unique_id("said")
    body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64, max_epochs=10)
    body |= {"target_metric": 0.5, "learning_curve_stop": False}
    assert http.post("/jobs", json=body).status_code == 201
    for metric in (0.5, 0.1):  # the default converges at its first epoch; the other never
        trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
        for epoch in range(1, 11):
            report = trial | {"time": 0.0, "energy": 8000.2469134 * epoch, "metric": metric}
            if http.post("/report", json=report | {"current_epoch": epoch}).json()["stop_train"]:
                break
        assert http.patch("/trials", json=trial).status_code == 200
    said = [t["message"] for t in http.get(f"/api/jobs/{job_id}").json()["trials"]]
    stopped = next(m for m in said if "exceeded the cost upper bound" in m)
    assert "min_cost(4000.1234567)" in stopped  # as stored: upstream's words
    html = http.get("/dashboard/jobs/" + quote(job_id, safe="")).text
    cell = re.search(r'<td class="message" title="([^"]+)">([^<]+)</td>', html)
    assert cell is not None, html
    assert cell.group(1) == html_escape(stopped)
    assert "min_cost(4,000)" in cell.group(2)
    assert "4000.12" not in cell.group(2)


def test_percentages_read_with_thousands_separators() -> None:
    """A job that spent 3,950 times its default's cost read "394953.9% more cost"."""
    assert [percent_text(x) for x in (12.54, -3.06, 394953.94)] == ["12.5", "-3.1", "394,953.9"]


def test_a_trial_shows_its_learning_curve_as_a_sparkline(http: httpx.Client) -> None:
    job_id = unique_id("curves")
    body = job_body(job_id, batch_sizes=[64], default_batch_size=64, target_metric=0.5)
    assert http.post("/jobs", json=body).status_code == 201
    for metrics in ([0.2, 0.4, 0.5], [0.5]):  # a curve, then a run done in one epoch
        trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
        for epoch, metric in enumerate(metrics, start=1):
            report = trial | {"time": epoch, "energy": 10.0 * epoch, "metric": metric}
            http.post("/report", json=report | {"current_epoch": epoch})
        assert http.patch("/trials", json=trial).status_code == 200
    html = http.get("/dashboard/jobs/" + quote(job_id, safe="")).text
    (line,) = re.findall(r'<polyline points="([^"]+)"', html)  # one point: nothing to draw
    assert line == sparkline([(1, 0.2), (2, 0.4), (3, 0.5)])
    assert "learning curve: 0.2 at epoch 1, 0.4 at epoch 2, 0.5 at epoch 3" in html


def test_a_sparkline_steps_up_to_the_better_metric() -> None:
    # 64 x 16 px: epochs 0..3 across, the worst metric at y 15, the best at y 1.
    assert sparkline([(1, 0.2), (2, 0.4), (3, 0.5)]) == (
        "0,15 21.33,15 42.67,15 42.67,5.67 64,5.67 64,1"
    )
    assert sparkline([(2, 0.9), (4, 0.5)], higher_is_better=False) == "0,15 32,15 64,15 64,1"
    assert sparkline([(1, 0.2)]) == ""
    assert sparkline(None) == ""


def test_a_sparkline_of_extreme_metrics_stays_in_its_box() -> None:
    line = sparkline([(1, -1.7e308), (2, 0.0), (3, 1.7e308)])
    assert "nan" not in line
    assert "inf" not in line
    points = [tuple(map(float, point.split(","))) for point in line.split()]
    assert all(0 <= x <= 64 and 1 <= y <= 15 for x, y in points)
    assert points[0][1] == 15
    assert points[-1][1] == 1  # the best metric at the top
    assert [y for _, y in points].count(8) == 2  # 0 halfway between the extremes


def test_the_host_header_is_not_echoed_into_redirects_or_links(http: httpx.Client) -> None:
    job_id = unique_id("host")
    assert http.post("/jobs", json=job_body(job_id)).status_code == 201
    # A tokenless loopback server answers loopback names only (tests/api/test_host_check.py):
    # an unusual one shows whether the pages echo the name.
    evil = {"Host": "127.9.9.9:1234"}
    home = http.get("/", headers=evil, follow_redirects=False)
    assert home.status_code == 307
    assert home.headers["location"] == "/dashboard"
    # The framework's trailing-slash redirects too, with their query.
    for path, target in (
        ("/dashboard/", "/dashboard"),
        ("/dashboard/?prefix=a", "/dashboard?prefix=a"),
        ("/jobs/batch_size/?job_id=a", "/jobs/batch_size?job_id=a"),
    ):
        slash = http.get(path, headers=evil, follow_redirects=False)
        assert slash.status_code == 307, path
        assert slash.headers["location"] == target, path
    for path in ("/dashboard", "/dashboard/jobs/" + quote(job_id, safe=""), "/dashboard/jobs/x"):
        page = http.get(path, headers=evil)
        assert "127.9.9.9" not in page.text, path
        assert 'href="/dashboard' in page.text, path
