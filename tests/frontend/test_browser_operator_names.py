"""The Operator charts read on scoped names (MindSpore / msprof: ``Default/network-WithLossCell/…/Conv2D-op8``):
the donut's legend shows each op's own name (parent segments only where two names would read the same), the full
name on hover, at most 12 entries plus "Other", and the donut keeps its size; the top-N bars keep one bar per group.
On ``sample_data.scoped``'s run, whose names are known by construction, and on the real msprof sample when it is
there."""

from __future__ import annotations

import pytest

from ascendscope.sample_data.scoped import FORWARD, write_scoped_run
from tests.browser_helpers import api
from tests.conftest import REAL_SAMPLES, ingest_ready
from tests.samples import needs_real

pytestmark = pytest.mark.browser

PIE = "#op-type-pie"
CHART = """(sel) => { const n = document.querySelector(sel);
  return n && n.data ? { labels: n.data[0].labels, custom: n.data[0].customdata } : null; }"""
BOXES = """() => {
  const card = document.querySelector('#op-type-pie').closest('.v-card').getBoundingClientRect();
  const pie = document.querySelector('#op-type-pie .pielayer').getBoundingClientRect();
  const legend = document.querySelector('#op-type-pie .legend').getBoundingClientRect();
  const texts = [...document.querySelectorAll('#op-type-pie .legend .legendtext')].map((t) => t.textContent);
  return { card: [card.left, card.right], pie: [pie.width, pie.height], legend: [legend.left, legend.right], texts };
}"""


@pytest.fixture(scope="module")
def scoped_runs(runs, tmp_path_factory):
    src = write_scoped_run(tmp_path_factory.mktemp("scoped") / "run")
    return ingest_ready(runs.data_dir, {"scoped": src})


def expected_short(full: str, others: list[str], chars: int = 32) -> str:
    """The rule, written out for the generated names: the op's own name, or with its parent segment when another
    shown name ends the same; over ``chars``, the parent loses its end (``layer0-De…/MatMulV2-op3``)."""
    own = full.rsplit("/", 1)[1]
    if not any(o != full and o.rsplit("/", 1)[1] == own for o in others):
        return own
    label = "/".join(full.split("/")[-2:])
    return label if len(label) <= chars else label[:chars - 2 - len(own)] + "…/" + own


def open_operator(page, base, run_id):
    page.set_default_timeout(30_000)
    page.goto(f"{base}/runs/{run_id}/operator")
    page.locator(f"{PIE} .pielayer path").first.wait_for()
    page.locator("#op-top-bar .bars path").first.wait_for()


@pytest.mark.parametrize("size", [(1280, 720), (1600, 1000)])
def test_the_donut_shows_short_names_with_the_scope_on_hover(page, live_server, scoped_runs, size):
    page.set_viewport_size({"width": size[0], "height": size[1]})
    rid = scoped_runs["scoped"]
    ov = api(live_server, f"/api/runs/{rid}/operators", rank=0, kind="computing", top_n=15)
    assert ov["types"]["by"] == "name" and len(ov["types"]["rows"]) == 15
    full = [t["type"] for t in ov["types"]["rows"]]
    assert all(f.startswith(("Default/", "Gradients/")) for f in full)
    open_operator(page, live_server.base_url, rid)
    chart = page.evaluate(CHART, PIE)
    shown = full[:12]
    assert chart["labels"] == [expected_short(f, shown) for f in shown] + ["Other"]
    assert chart["custom"][:12] == shown  # the hover's full name
    assert any("/" in label for label in chart["labels"]), "the names chosen must include a clash"
    boxes = page.evaluate(BOXES)
    assert boxes["texts"] == chart["labels"]
    assert boxes["legend"][0] >= boxes["card"][0] - 1, boxes  # the legend is not cut on the left
    assert min(boxes["pie"]) >= 120, boxes  # a donut, not a dot


def test_the_top_bars_keep_one_bar_per_group(page, live_server, scoped_runs):
    rid = scoped_runs["scoped"]
    open_operator(page, live_server.base_url, rid)
    page.locator("#op-group-by").select_option("name")
    page.wait_for_function("() => document.querySelector('#op-top-title').textContent.includes('Computing Operator')")
    page.wait_for_timeout(300)
    labels, custom = page.evaluate("() => { const d = document.querySelector('#op-top-bar').data[0];"
                                   " return [d.y, d.customdata]; }")
    assert len(labels) == len(set(labels)) == len(custom) >= 13
    assert all(not label.startswith(("Default/", "Gradients/")) for label in labels)
    assert all(c[2].startswith(("Default/", "Gradients/")) for c in custom)  # the full name on hover
    assert any(label.startswith(FORWARD.format(k=0).rsplit("/", 1)[1]) for label in labels)  # a clash, told apart


@needs_real  # (the twin keeps torch_npu's names)
def test_the_real_msprof_sample_reads(page, live_server, runs):
    src = REAL_SAMPLES / "mindinsight_msprof_2dev_2023"
    rid = ingest_ready(runs.data_dir, {"msprof_names": src})["msprof_names"]
    open_operator(page, live_server.base_url, rid)
    chart = page.evaluate(CHART, PIE)
    assert len(chart["labels"]) <= 13 and all(len(label) <= 32 for label in chart["labels"])
    assert any(c.startswith("Default/") for c in chart["custom"])
    boxes = page.evaluate(BOXES)
    assert boxes["legend"][0] >= boxes["card"][0] - 1 and min(boxes["pie"]) >= 120, boxes
