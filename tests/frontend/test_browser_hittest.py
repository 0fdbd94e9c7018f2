"""The timeline's hit testing (frontend/static/js/timeline/hittest.js) on a hand-built scene, in chromium: the module
is imported into a page of the app (under its real policy) and asked what lies under chosen points.

The scene: a pinned slice track (40 px) above the scrolled area, scrolled by 10 px, which holds a rank header, a
folded slice track 7 levels deep (5 shown, then the hidden-levels strip) and a counter track; the view shows
ns 1000–2000 on 1000 px (k = 1 px/ns).
"""

from __future__ import annotations

import pytest

from tests.conftest import serving

pytestmark = pytest.mark.browser

SCENE_JS = """async () => {
  const h = await import('/static/js/timeline/hittest.js');
  const track = (id, extra) => ({ type: 'track', id: `t${id}`, track: { track_id: id, kind: 'slice', ...extra } });
  const pinned = { ...track(9, { max_depth: 0 }), depths: 1, folded: false };
  const deep = { ...track(1, { max_depth: 6 }), depths: 7, folded: true, deep: true };
  const counter = track(2, { kind: 'counter', counter_name: 'mem' });
  const layout = {
    pinned: [{ node: pinned, y: 0, h: 40, pinnedArea: true }],
    scroll: [{ node: { type: 'rank', id: 'r0' }, y: 0, h: 24 }, { node: deep, y: 24, h: 99 },
             { node: counter, y: 123, h: 38 }],
  };
  const slices = (rows) => ({ n: rows.length, ts: rows.map((r) => r[0]), dur: rows.map((r) => r[1]),
    depth: rows.map((r) => r[2]), sliceId: rows.map((r) => r[3]), nameId: rows.map((_, i) => i),
    names: rows.map((r) => r[4]), lod: false, sliceCount: null });
  const entries = {
    9: slices([[1000, 50, 0, 91, 'pinned op']]),
    1: slices([[1100, 100, 0, 11, 'long'], [1150, 10, 0, 12, 'short'], [1500, 0.2, 1, 13, 'tiny'],
               [1300, 50, 6, 14, 'hidden level']]),
  };
  const series = [{ name: 'used', ts: [1100, 1300], value: [5, 7], before: { value: 3 } }];
  const scene = { layout, pinnedH: 40, scrollY: 10, view: { start: 1000, end: 2000 }, k: 1,
    data: { sliceEntry: (id) => entries[id] || null, counterEntry: (id) => (id === 2 ? { series } : null) } };
  const id = (hit) => (hit ? hit.slice_id : null);
  const row = (y) => { const r = h.rowAt(scene, y); return r ? [r.row.node.id, r.top] : null; };
  const arrows = [{ x1: 0, y1: 0, cx1: 30, cx2: 70, x2: 100, y2: 0, id: 'curve' },
                  { x1: 0, y1: 8, cx1: 30, cx2: 70, x2: 100, y2: 8, id: 'below' },
                  { clip: 'dst', px: 200, py: 50, sx: 250, sy: 50, id: 'stub' }];
  const arrow = (x, y) => { const a = h.arrowAt(arrows, x, y); return a ? a.id : null; };
  const counterAt = (x, y) => { const c = h.counterAt(scene, x, y); return c ? [c.name, c.values] : null; };
  const folded = (x, y) => { const n = h.foldedAt(scene, x, y); return n ? n.id : null; };
  return {
    rows: [row(20), row(45), row(60), row(160), row(200)],
    tops: [h.rowTop(scene, layout.pinned[0]), h.rowTop(scene, layout.scroll[1])],
    slices: [id(h.sliceAt(scene, 20, 10)), id(h.sliceAt(scene, 130, 60)), id(h.sliceAt(scene, 155, 60)),
             id(h.sliceAt(scene, 201, 60)), id(h.sliceAt(scene, 210, 60)), id(h.sliceAt(scene, 502, 79)),
             id(h.sliceAt(scene, 320, 145)), id(h.sliceAt(scene, 130, 45)), id(h.sliceAt(scene, 130, 160))],
    hit: h.sliceAt(scene, 155, 60),
    counters: [counterAt(50, 160), counterAt(200, 160), counterAt(400, 160), counterAt(200, 60)],
    folded: [folded(320, 145), folded(320, 130), folded(320, 141), folded(320, 153)],
    arrows: [arrow(50, 1), arrow(50, 6), arrow(50, 3), arrow(50, 20), arrow(225, 52), arrow(300, 50)],
  };
}"""


@pytest.fixture(scope="module")
def app_base(tmp_path_factory):
    """The app over an empty store: the module only needs a page of ours to be imported into."""
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    data_dir = tmp_path_factory.mktemp("hittest-store")
    with serving(create_app(Settings.from_env(environ={}, data_dir=str(data_dir)))) as base:
        yield base


def test_hit_testing_on_a_hand_built_scene(app_base, page):
    page.goto(f"{app_base}/")
    page.locator("#runs-table").wait_for()
    r = page.evaluate(SCENE_JS)
    # pinned rows stay put; scrolled rows move under the pinned area (which covers their top 10 px here)
    assert r["rows"] == [["t9", 0], ["r0", 30], ["t1", 54], ["t2", 153], None]
    assert r["tops"] == [0, 54]
    # the pinned track; a long slice; of two under the point the shorter; 1 px past the end is still within the
    # 2 px reach, 10 px is not; a sub-pixel slice counts as 1 px wide; a hidden level (the strip) is no slice;
    # the rank header and a counter track have none
    assert r["slices"] == [91, 11, 12, 11, None, 13, None, None, None]
    assert r["hit"] == {"track_id": 1, "slice_id": 12, "ts_ns": 1150, "dur_ns": 10, "depth": 0, "name": "short",
                        "lod": False, "count": 1}
    # before the first point: the value before the window; then the last point at or before the time
    assert r["counters"] == [["mem", [["used", 3]]], ["mem", [["used", 5]]], ["mem", [["used", 7]]], None]
    # the strip under the 5 shown levels: from its top (1 px of slack) to the row's end
    assert r["folded"] == ["t1", None, "t1", None]
    # the nearest arrow within 5 px: a curve, the one below it, a clipped arrow's stub
    assert r["arrows"] == ["curve", "below", "curve", None, "stub", None]
