"""``ascendscope report``: the three formats hold the same numbers as the API; the HTML file is self-contained
(plotly inlined from the installed package) and opens offline in chromium with its charts and no console error;
names from the profile cannot break out of their table cell or chart data."""

from __future__ import annotations

import json

import pytest

from ascendscope.metrics import compute
from ascendscope.report import collect, render_html, write
from ascendscope.server.cli import main

HOSTILE = '</script><img src=x onerror="window.pwned=1">'


@pytest.fixture(scope="module")
def report_data(opened):
    return collect(opened["generated"])


def test_the_json_report_holds_the_apis_numbers(opened, tmp_path, capsys):
    run = opened["generated"]
    assert main(["report", str(run.database), "-o", str(tmp_path / "r.json")]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    metrics = compute(run)
    assert doc["metrics"]["step_time"] == metrics["step_time"]
    steps = run.steps()
    assert len(doc["steps"]) == len(steps) == doc["steps_total"]
    assert doc["steps_per_rank"][0]["e2e_ns"] == round(steps[steps["rank"] == 0]["e2e_ns"].mean())
    kernels = run.kernels(group_by="name")
    top = kernels.groupby("name")["total_ns"].sum().sort_values(ascending=False)
    assert doc["top_kernels"][0]["name"] == top.index[0] and doc["top_kernels"][0]["total_ns"] == top.iloc[0]
    assert [r["rank"] for r in doc["communication"]["ranks"]] == run.ranks
    assert len(doc["advice"]) == len(run.advice()) > 0
    assert doc["configuration"]["rank_count"] == 2 and len(doc["configuration"]["ranks"]) == 2
    assert doc["memory"]["peak"]["peak_reserved_mb"] == run.memory()["peak_reserved_mb"].max()


def test_markdown_and_stdout(opened, tmp_path, capsys):
    run = opened["generated"]
    assert main(["report", str(run.database), "--format", "md"]) == 0
    out = capsys.readouterr().out
    for title in ("## Configuration", "## Headline metrics", "## Step breakdown per rank", "## Top kernels",
                  "## Top torch ops", "## Communication per rank", "## Memory peaks", "## Advice"):
        assert title in out
    assert main(["report", str(run.database), "-o", str(tmp_path / "r.txt")]) == 2  # unknown format
    assert "html, md or json" in capsys.readouterr().err


def test_names_are_escaped(report_data):
    data = json.loads(json.dumps(report_data))
    data["top_kernels"][0]["name"] = HOSTILE
    data["advice"][0]["title"] = HOSTILE
    page = render_html(data)
    assert '<img src=x' not in page and "</script><img" not in page


def _open_offline(browser, path, artifacts_dir, shot):
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_function("() => document.querySelectorAll('.main-svg').length >= 2")
    page.wait_for_timeout(300)
    charts = page.locator(".js-plotly-plot").count()
    bars = page.locator(".js-plotly-plot .bars path").count()
    pwned = page.evaluate("() => window.pwned === 1")
    page.screenshot(path=str(artifacts_dir / shot), full_page=False)
    context.close()
    return errors, requests, charts, bars, pwned


@pytest.mark.browser
@pytest.mark.parametrize("name", ["generated", "level1"])
def test_the_html_report_opens_offline_without_errors(opened, runs, browser, tmp_path, artifacts_dir, name):
    if name not in runs.ids:
        pytest.skip("no sample")
    data = collect(opened[name])
    data["top_kernels"][0]["name"] = HOSTILE  # and names cannot run script
    target = tmp_path / "report.html"
    target.write_text(render_html(data), encoding="utf-8")
    errors, requests, charts, bars, pwned = _open_offline(browser, target, artifacts_dir, f"report_{name}.png")
    assert not errors, errors
    assert all(u.startswith(("file:", "data:", "blob:")) for u in requests), requests  # nothing fetched
    assert charts == 2 and bars > 0 and not pwned


def test_write_picks_the_format_from_the_suffix(opened, tmp_path):
    run = opened["generated"]
    assert write(run, tmp_path / "r.md").read_text().startswith("# ascendscope report")
    html = write(run, tmp_path / "r.html").read_text()
    assert html.startswith("<!doctype html>") and "cdn.plot.ly/plotly" not in html and "Plotly.newPlot" in html
