"""Names from the profiled data are text, never markup: a tiny generated run whose kernel type, kernel name,
memory component, CANN module, allocation name, communication op and transport are HTML shows them literally on
the Operator, Memory, Summary and Communication pages, and no link or image from them appears — not in tables,
not in plotly's legends, tick labels or hover labels (plotly renders a subset of HTML there). Needs no real
sample: the run is generated, then its files are edited."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from tests.conftest import serving

ROOT = Path(__file__).resolve().parents[2]

LINK = '<a href="https://example.invalid/x">click</a>'
IMAGE = "<img src=x onerror=alert(1)>"
TRANSPORT = '<a href="https://example.invalid/t">SDMA</a>'
NOTHING_LIVE = "a[href^='https://example.invalid'], img"  # our own links may carry it URL-encoded


def rewrite_csv(path: Path, column: str, value, where=lambda row: True):
    """Set ``column`` to ``value`` in the rows ``where`` selects; every other cell keeps its value."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    col = rows[0].index(column)
    for row in rows[1:]:
        if where(dict(zip(rows[0], row))):
            row[col] = value
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)


def hostile_run(root: Path) -> Path:
    from ascendscope.sample_data.generate import generate_run

    run = root / "run"
    generate_run(run, ranks=2, steps=1, ops_per_step=20, seed=3)
    for rank_dir in sorted(run.glob("rank*_ascend_pt")):
        out = rank_dir / "ASCEND_PROFILER_OUTPUT"
        kernels = out / "kernel_details.csv"
        with open(kernels, newline="", encoding="utf-8") as fh:
            computing = [r for r in csv.DictReader(fh) if r["Accelerator Core"] != "HCCL"]
        top_type = max(computing, key=lambda r: float(r["Duration(us)"]))["Type"]
        rewrite_csv(kernels, "Type", LINK, lambda r, top=top_type: r["Type"] == top)
        rewrite_csv(kernels, "Name", IMAGE, lambda r: r["Type"] == LINK)
        rewrite_csv(out / "memory_record.csv", "Component", LINK, lambda r: r["Component"] == "APP")
        rewrite_csv(out / "npu_module_mem.csv", "Component", IMAGE, lambda r: r["Component"] == "HCCL")
        rewrite_csv(out / "operator_memory.csv", "Name", IMAGE)
        comm = out / "communication.json"
        data = json.loads(comm.read_text())
        for step in data.values():
            ops = step.get("collective") or {}
            for key in [k for k in ops if k.startswith("hcom_")]:
                ops[LINK + key[key.index("@"):]] = ops.pop(key)
            for info in ops.values():
                bw = info["Communication Bandwidth Info"]
                if "SDMA" in bw:
                    bw[TRANSPORT] = bw.pop("SDMA")
        comm.write_text(json.dumps(data))
    return run


def test_no_script_writes_markup():
    """The escaping rests on this: DOM is built from text nodes (plotly gets escaped strings), never from HTML."""
    for script in (ROOT / "frontend" / "static" / "js").rglob("*.js"):
        code = re.sub(r"//.*", "", script.read_text())
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|createContextualFragment",
                             code), script.name


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A live server over a store holding the edited run (named with HTML too); yields (base, run id)."""
    from ascendscope.ingest.pipeline import ingest_path
    from ascendscope.server.app import create_app
    from ascendscope.server.runs import RunStore
    from ascendscope.server.settings import Settings

    root = tmp_path_factory.mktemp("hostile")
    src = hostile_run(root)
    store = RunStore(root / "data")
    run = store.create_run(LINK, LINK)
    summary = ingest_path(src, store.db_path(run.id))
    store.set_status(run.id, "ready", summary={"ranks": summary["ranks"]})
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(root / "data")))) as base:
        yield base, run.id


def open_view(page, hostile, view):
    base, run = hostile
    page.goto(f"{base}/runs/{run}/{view}")
    page.wait_for_selector(f"#{view}-view")


def wait_plot(page, node_id):
    page.wait_for_function("(id) => { const d = document.getElementById(id); return d && d._fullLayout; }",
                           arg=node_id)


def texts(page, selector) -> str:
    return " ".join(page.locator(selector).all_text_contents())


def hover_hostile_bar(page, node_id):
    """Move the mouse over the bar of the chart's first trace whose data names example.invalid."""
    i = page.evaluate("""(id) => JSON.stringify(document.getElementById(id).data[0].customdata)
        .includes('example.invalid') && document.getElementById(id).data[0].customdata
        .findIndex((c) => JSON.stringify(c).includes('example.invalid'))""", node_id)
    assert i is not False and i >= 0
    box = page.locator(f"#{node_id} .trace .point path").nth(i).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    for dx in (-3, 0, 1, 0):  # plotly hovers only after mouse moves it has not throttled
        page.mouse.move(x + dx, y)
        page.wait_for_timeout(120)


def assert_nothing_live(page):
    assert page.locator(NOTHING_LIVE).count() == 0, page.locator(NOTHING_LIVE).evaluate_all(
        "(els) => els.map((e) => e.outerHTML)")


@pytest.mark.browser
def test_operator_page(page, hostile):
    open_view(page, hostile, "operator")
    for node in ("op-type-pie", "op-top-bar"):
        wait_plot(page, node)
    page.locator("#op-groups-table tbody td", has_text=LINK).first.wait_for()
    assert LINK[:28] in texts(page, "#op-type-pie .legendtext")  # as text, clipped to the legend's 32 characters
    assert LINK[:24] in texts(page, "#op-top-bar .ytick text")  # a tick label, as text, clipped
    hover_hostile_bar(page, "op-top-bar")
    hover = page.locator("#op-top-bar .hoverlayer .hovertext")
    hover.wait_for()
    assert LINK in hover.text_content()
    page.locator("#op-groups-table tbody tr button.v-expand").first.click()
    page.locator(".v-instance-table tbody td", has_text=IMAGE).first.wait_for()
    assert_nothing_live(page)


@pytest.mark.browser
def test_memory_page(page, hostile):
    open_view(page, hostile, "memory")
    for node in ("mem-chart", "mem-modules"):
        wait_plot(page, node)
    page.locator("#mem-table tbody td", has_text=IMAGE).first.wait_for()
    assert f"{LINK} Reserved" in texts(page, "#mem-chart .legendtext")
    assert IMAGE in texts(page, "#mem-modules .legendtext")
    assert LINK in page.locator("#mem-filters").inner_text()
    assert IMAGE in page.locator("#mem-peak").inner_text()
    assert_nothing_live(page)


@pytest.mark.browser
def test_summary_page(page, hostile):
    open_view(page, hostile, "summary")
    wait_plot(page, "sum-chart")
    page.locator("#sum-top-table tbody td", has_text=LINK).first.wait_for()
    assert_nothing_live(page)


@pytest.mark.browser
def test_communication_page(page, hostile):
    open_view(page, hostile, "communication")
    for node in ("comm-gantt", "comm-bw-chart"):
        wait_plot(page, node)
    page.locator("#comm-ops-table tbody td", has_text=LINK).first.wait_for()
    assert LINK in texts(page, "#comm-op option")
    assert TRANSPORT in texts(page, "#comm-bw-chart .xtick text")
    hover_hostile_bar(page, "comm-gantt")
    hover = page.locator("#comm-gantt .hoverlayer .hovertext")
    hover.wait_for()
    assert LINK in hover.text_content()
    assert_nothing_live(page)
    page.click("#comm-mode-matrix")
    wait_plot(page, "comm-heatmap")
    page.select_option("#comm-metric", "transport_type")
    page.locator("#comm-matrix-note", has_text="Transport Type").wait_for()
    assert_nothing_live(page)
