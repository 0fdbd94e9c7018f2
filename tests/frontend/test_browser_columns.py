"""The binary column answers in the real browser (issue #18 item 2): columns.js, under the page's real CSP,
decodes slices, counters and flows to exactly what the JSON answers hold (NaN where JSON has null), and the
timeline page asks for and draws them; on a generated run, and on the real level1 sample."""

from __future__ import annotations

import pytest

from ascendscope.server.columns import MEDIA_TYPE
from tests.conftest import PYTORCH_TEXT, serving, store_with_copy

pytestmark = pytest.mark.browser
READY = "() => window.__timeline && window.__timeline.ready && window.__timeline.pending() === 0"

# fetch each URL as JSON and as binary, decode the binary with columns.js, and list every difference
ROUND_TRIP = """async (urls) => {
  const { COLUMNS_TYPE, decodeColumns } = await import('/static/js/common/columns.js');
  const same = (a, b, path, out) => {
    if (ArrayBuffer.isView(a)) a = Array.from(a);
    if (Array.isArray(a) || Array.isArray(b)) {
      if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) {
        out.push(`${path}: length ${a && a.length} vs ${b && b.length}`); return;
      }
      a.forEach((v, i) => same(v, b[i], `${path}[${i}]`, out)); return;
    }
    if (a && typeof a === 'object' && b && typeof b === 'object') {
      const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
      for (const k of keys) same(a[k], b[k], `${path}.${k}`, out);
      return;
    }
    if (Number.isNaN(a) && b === null) return;
    if (a !== b) out.push(`${path}: ${a} vs ${b}`);
  };
  const report = [];
  for (const url of urls) {
    const json = await (await fetch(url, { headers: { Accept: 'application/json' } })).json();
    const resp = await fetch(url, { headers: { Accept: COLUMNS_TYPE } });
    const type = resp.headers.get('Content-Type');
    const decoded = decodeColumns(await resp.arrayBuffer());
    const diffs = [];
    same(decoded, json, '', diffs);
    report.push({ url, type, diffs: diffs.slice(0, 5), typed: Object.values(decoded.tracks?.[0] || decoded)
      .filter((v) => ArrayBuffer.isView(v)).length });
  }
  return report;
}"""


@pytest.fixture(scope="module")
def generated_server(generated_db, tmp_path_factory):
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data = tmp_path_factory.mktemp("columns-browser")
    store, run_id = store_with_copy(generated_db, data)
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(data)), store=store)) as base:
        yield base, run_id


@pytest.fixture(params=["generated", "level1"])
def server_run(request, generated_server):
    if request.param == "generated":
        return generated_server
    if not PYTORCH_TEXT.is_dir():
        pytest.skip(f"real samples not found at {PYTORCH_TEXT}")
    live = request.getfixturevalue("live_server")
    return live.base_url, live.runs["level1"]


def urls_for(page, base: str, run_id: str) -> list[str]:
    meta = page.request.get(f"{base}/api/runs/{run_id}/timeline/tracks").json()
    api = f"/api/runs/{run_id}/timeline"
    t0, t1 = int(meta["start_ns"]), int(meta["end_ns"])
    mid = t0 + (t1 - t0) // 2
    slices = [t["track_id"] for t in meta["tracks"] if t["kind"] != "counter" and t["slice_count"]]
    counters = [t["track_id"] for t in meta["tracks"] if t["kind"] == "counter"]
    urls = []
    for window in ("", f"&start_ns={mid}&end_ns={mid + (t1 - t0) // 50}"):
        for width in (1600, 40):
            ids = "&".join(f"track_id={i}" for i in slices[:6])
            urls.append(f"{api}/slices?{ids}&width_px={width}{window}")
        urls.append(f"{api}/counters?{'&'.join(f'track_id={i}' for i in counters[:4])}&width_px=900{window}")
        urls.append(f"{api}/flows?width_px=1600{window}")
    return urls


def test_the_browser_decodes_what_the_json_says(page, server_run):
    base, run_id = server_run
    page.goto(f"{base}/")
    report = page.evaluate(ROUND_TRIP, urls_for(page, base, run_id))
    assert len(report) == 8
    for item in report:
        assert item["type"] == MEDIA_TYPE, item
        assert item["diffs"] == [], item
    assert any(item["typed"] for item in report)  # the decoded columns are typed arrays, not lists


def test_the_timeline_asks_for_binary_and_draws_it(page, server_run):
    base, run_id = server_run
    types = []
    page.on("response", lambda r: types.append(r.headers.get("content-type"))
            if "/timeline/slices?" in r.url or "/timeline/counters?" in r.url else None)
    with page.expect_response(lambda r: "/timeline/slices?" in r.url) as first:
        page.goto(f"{base}/runs/{run_id}/timeline")
    page.wait_for_function(READY)
    assert first.value.headers["content-type"] == MEDIA_TYPE
    assert set(types) == {MEDIA_TYPE}
    stats = page.evaluate("() => window.__timeline.stats")
    assert stats["slices"] > 0, stats  # slices decoded from the binary answers were drawn
