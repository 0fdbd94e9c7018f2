"""ingest.nesting (vectorised order, depth, parent and flow binding) against a plain re-statement of each rule.

The reference below follows the definitions in ingest/nesting.py's docstring one slice at a time: a sorted
sweep of start and end events for depth, "the latest earlier slice one level up" for parent, a stack walk for
tracks that do not nest, and a direct search for flow ends. It is slow and obvious; the module must agree with
it on every real trace, on edge cases and on random tracks.
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from pathlib import Path

import duckdb
import numpy as np
import pytest

from ascendscope.ingest import duckmem, nesting, sqlfuncs, trace, traceflows
from ascendscope.ingest.pipeline import ingest_path
from tests.ingest_helpers import PYTORCH_TEXT, REAL
from tests.shared_runs import single_file


def reference(slices, ends):
    """slices: (seq, track, ts, dur); ends: (seq, track, ts, enclosing) -> (rows in order, depth, parent, bound)."""
    order = sorted(slices, key=lambda s: (s[1], s[2], -s[3], s[0]))
    n = len(order)
    end = [s[2] + s[3] for s in order]
    rows_of = defaultdict(list)
    for i, s in enumerate(order):
        rows_of[s[1]].append(i)
    depth, parent = [0] * n, [-1] * n
    for rows in rows_of.values():
        events = []
        for i in rows:
            ts, dur = order[i][2], order[i][3]
            events.append((ts, 1, i, 0))
            events.append((ts + dur, 0 if dur > 0 else 1, i, 1))
        level = 0
        for _t, _k, i, is_end in sorted(events):
            if is_end:
                level -= 1
            else:
                depth[i] = level
                level += 1
        latest_at: dict[int, int] = {}
        for i in rows:
            parent[i] = latest_at.get(depth[i] - 1, -1) if depth[i] > 0 else -1
            latest_at[depth[i]] = i
        if any(parent[i] >= 0 and end[parent[i]] < end[i] for i in rows):
            stack: list[int] = []
            for i in rows:
                while stack and end[stack[-1]] <= order[i][2]:
                    stack.pop()
                depth[i] = depth[stack[-1]] + 1 if stack else 0
                parent[i] = stack[-1] if stack else -1
                stack.append(i)
    bound = []
    for _seq, track, t, enclosing in ends:
        rows = rows_of.get(track, [])
        starts = [order[i][2] for i in rows]
        if enclosing:
            k = bisect.bisect_right(starts, t) - 1
            cand = rows[k] if k >= 0 else -1
            while cand >= 0 and end[cand] < t:
                cand = parent[cand]
        else:
            k = bisect.bisect_left(starts, t)
            cand = rows[k] if k < len(rows) else -1
        bound.append(cand)
    return order, depth, parent, bound


def reference_pairs(ends):
    """ends: (seq, key, ts, is_start) -> [(start seq, finish seq)] in flow order."""
    starts = defaultdict(list)
    for seq, key, ts, is_start in ends:
        if is_start:
            starts[key].append((ts, seq))
    pairs = []
    for seq, key, ts, is_start in ends:
        if is_start or not starts[key]:
            continue
        earlier = [s for s in starts[key] if s[0] <= ts]
        src = max(earlier) if earlier else min(starts[key])
        pairs.append((src, seq))
    return [(s[1], f) for s, f in sorted(pairs, key=lambda p: (p[0][0], p[0][1], p[1]))]


def check_pairs(ends):
    seq = np.array([e[0] for e in ends], dtype=np.int64)
    src, dst = nesting.pair_flows([e[1] for e in ends], [e[3] for e in ends], [e[2] for e in ends], seq)
    assert list(zip(seq[src].tolist(), seq[dst].tolist())) == reference_pairs(ends)


def check(slices, ends, batch=None):
    """Run the module (in batches of whole tracks when ``batch`` is given) and compare with the reference."""
    order, depth, parent, bound = reference(slices, ends)
    cols = [np.array([s[k] for s in slices], dtype=np.int64) for k in range(4)]
    seq, track, ts, dur = cols
    tracks = sorted(set(track.tolist()))
    groups = [tracks] if batch is None else [tracks[i:i + batch] for i in range(0, len(tracks), batch)]
    got_seq, got_depth, got_parent, got_ids, got_bound = [], [], [], [], {}
    first = 1
    for group in groups:
        mask = np.isin(track, group)
        nested = nesting.nest(seq[mask], track[mask], ts[mask], dur[mask], first)
        # as ingest calls it: rows already ordered by the database
        db_order = np.lexsort((seq[mask], -dur[mask], ts[mask], track[mask]))
        again = nesting.nest(seq[mask][db_order], track[mask][db_order], ts[mask][db_order], dur[mask][db_order],
                             first, presorted=True)
        assert all(np.array_equal(getattr(nested, k), getattr(again, k))
                   for k in ("local_id", "seq", "track", "ts", "dur", "depth", "parent"))
        got_seq += nested.seq.tolist()
        got_ids += nested.local_id.tolist()
        got_depth += nested.depth.tolist()
        got_parent += nested.parent.tolist()
        mine = [e for e in ends if e[1] in set(group)]
        res = nesting.bind(nested, [e[1] for e in mine], [e[2] for e in mine], [e[3] for e in mine])
        got_bound.update({e[0]: int(b) for e, b in zip(mine, res)})
        first += int(mask.sum())
    assert got_seq == [s[0] for s in order]
    assert got_ids == list(range(1, len(order) + 1))
    assert got_depth == depth
    assert got_parent == [p + 1 for p in parent]  # local ids; 0 = none
    assert [got_bound.get(e[0], 0) for e in ends] == [b + 1 for b in bound]


def check_parts(slices, ends, part: int):
    """Nest each track a part of about ``part`` slices at a time (cut where the start changes, as ingest cuts a
    big track) and bind each part's flow ends; compare with the reference."""
    order, depth, parent, bound = reference(slices, ends)
    got_depth, got_parent, got_bound = [], [], {}
    first = 1
    for tr in sorted({s[1] for s in order}):
        rows = [s for s in order if s[1] == tr]
        starts = sorted({s[2] for s in rows})
        cuts = [starts[0]]  # the first start of each part
        for i in range(part, len(rows), part):
            if rows[i][2] > cuts[-1] and rows[i][2] != rows[i - 1][2]:
                cuts.append(rows[i][2])
        carry = nesting.TrackCarry()
        for k, lo in enumerate(cuts):
            hi = cuts[k + 1] if k + 1 < len(cuts) else None
            mine = [s for s in rows if s[2] >= lo and (hi is None or s[2] < hi)]
            ancestors = carry.ancestors()
            cols = [np.array([s[c] for s in mine], dtype=np.int64) for c in range(4)]
            nested = nesting.nest_part(*cols, first, carry)
            got_depth += nested.depth.tolist()
            got_parent += nested.parent.tolist()
            my_ends = [e for e in ends if e[1] == tr and (k == 0 or e[2] >= lo) and (hi is None or e[2] < hi)]
            res = nesting.bind(nested, [e[1] for e in my_ends], [e[2] for e in my_ends], [e[3] for e in my_ends],
                               ancestors=ancestors, next_id=first + len(mine) if hi is not None else 0)
            got_bound.update({e[0]: int(b) for e, b in zip(my_ends, res)})
            first += len(mine)
    assert got_depth == depth
    assert got_parent == [p + 1 for p in parent]
    assert [got_bound.get(e[0], 0) for e in ends] == [b + 1 for b in bound]


def _staged(path: Path, tmp_path: Path):
    """Slices and flow ends of one trace as ingest stages them (before nesting)."""
    con = duckdb.connect()
    sqlfuncs.install(con)
    tl = trace.TraceLoad(con, "t_", path, tmp_path, path.name)
    tl.read()
    for q in (trace.TRACKS, trace.RAW_SLICES):
        tl.sql(q)
    tl.sql(trace.FLOW_ENDS, part=traceflows.part_of(1))
    slices = con.execute("SELECT seq, local_track, ts_ns, dur_ns FROM t_x").fetchall()
    ends = con.execute("SELECT seq, local_track, ts_ns, enclosing FROM t_fe").fetchall()
    flow_ends = con.execute("SELECT seq, dense_rank() OVER (ORDER BY rank, cat, flow_key), ts_ns, is_start "
                            "FROM t_fe").fetchall()
    return slices, ends, flow_ends


REAL_TRACES = sorted(PYTORCH_TEXT.glob("level*/*/ASCEND_PROFILER_OUTPUT/trace_view.json")) + \
    sorted((REAL / "mindinsight_msprof_2dev_2023").rglob("msprof*.json"))[:2] + \
    sorted((REAL / "hta_gpu_kineto_nonascend" / "trace_filter").glob("*.json.gz"))[:2]


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: "/".join(p.parts[-4:]))
def test_real_traces_match_the_reference(path, tmp_path):
    slices, ends, flow_ends = _staged(path, tmp_path)
    assert slices
    check(slices, ends)
    check(slices, ends, batch=3)
    check_parts(slices, ends, part=97)
    check_pairs(flow_ends)


def test_ties_zero_lengths_and_edges():
    slices = [
        # track 1: a parent, two children touching end to start, zero-length slices at shared instants
        (1, 1, 0, 100), (2, 1, 0, 50), (3, 1, 50, 50), (4, 1, 50, 0), (5, 1, 50, 0), (6, 1, 100, 0),
        (7, 1, 100, 10), (8, 1, 0, 100),  # an identical twin of the parent nests under it (dur tie -> seq)
        # track 2: not properly nested (b outlives a), then a slice inside both
        (9, 2, 0, 10), (10, 2, 5, 10), (11, 2, 6, 2), (12, 2, 20, 5),
        # track 3: a single zero-length slice
        (13, 3, 7, 0),
    ]
    ends = [
        (100, 1, 50, True), (101, 1, 100, True), (102, 1, 100, False), (103, 1, 101, False),
        (104, 1, 111, True), (105, 1, 200, False), (106, 1, -5, True), (107, 1, -5, False),
        (108, 2, 15, True), (109, 2, 7, True), (110, 2, 16, False), (111, 3, 7, True), (112, 3, 7, False),
        (113, 4, 0, True),  # a lane without slices: unbound
    ]
    check(slices, ends)
    check(slices, ends, batch=1)
    for part in (1, 2, 3):
        check_parts(slices, ends, part)


@pytest.mark.parametrize("seed", range(8))
def test_random_tracks(seed):
    rnd = random.Random(seed)
    slices, ends, seq = [], [], 0
    for track in range(1, rnd.randint(2, 6)):
        t = 0
        for _ in range(rnd.randint(0, 300)):
            seq += 1
            t += rnd.choice([0, 0, 1, 3, 10])  # many equal starts
            slices.append((seq, track, t, rnd.choice([0, 0, 1, 2, 5, 20, 50])))
        for _ in range(rnd.randint(0, 60)):
            seq += 1
            ends.append((seq, track, rnd.randint(-5, t + 60), rnd.random() < 0.6))
    rnd.shuffle(slices)
    check(slices, ends)
    check(slices, ends, batch=2)
    for part in (1, 7, 40):
        check_parts(slices, ends, part)


def test_flow_pairing_edges():
    ends = [  # (seq, key, ts, is_start)
        (1, 1, 10, True), (2, 1, 20, False),                     # a plain pair
        (3, 2, 10, True), (4, 2, 10, True), (5, 2, 10, False),   # two starts at one instant: the later seq
        (6, 3, 30, True), (7, 3, 5, False), (8, 3, 40, False),   # a finish before every start: the first one
        (9, 4, 0, False),                                        # a finish without a start: no flow
        (10, 5, 1, True),                                        # a start without a finish: no flow
        (11, 6, 50, True), (12, 6, 60, True), (13, 6, 55, False), (14, 6, 70, False),  # reused ids
    ]
    assert reference_pairs(ends) == [(1, 2), (4, 5), (6, 7), (6, 8), (11, 13), (12, 14)]
    check_pairs(ends)


@pytest.mark.parametrize("seed", range(6))
def test_random_flow_ends(seed):
    rnd = random.Random(seed)
    ends = [(i, rnd.randint(1, 30), rnd.randint(0, 50), rnd.random() < 0.5) for i in range(1, rnd.randint(2, 400))]
    check_pairs(ends)


@pytest.mark.parametrize("seed", range(4))
def test_flow_keys_counted_and_pairs_unordered(seed):
    """``pair_flow_keys``: the starts and finishes of each key, and (unordered) the same flows; many ends share a
    time, keys are any int64 numbers."""
    rnd = random.Random(seed)
    n = rnd.randint(50, 3000)
    key = np.array([rnd.choice([-7, 0, 3, 1 << 61, 1 << 62]) + rnd.randint(0, 40) for _ in range(n)], dtype=np.int64)
    ts = np.array([rnd.randint(0, 9) for _ in range(n)], dtype=np.int64)
    is_start = np.array([rnd.random() < 0.4 for _ in range(n)])
    seq = np.array(rnd.sample(range(10 * n), n), dtype=np.int64)
    ends = [(int(seq[i]), int(key[i]), int(ts[i]), bool(is_start[i])) for i in range(n)]
    pairs = nesting.pair_flow_keys(key, is_start, ts, seq, ordered=True)
    assert list(zip(seq[pairs.src].tolist(), seq[pairs.dst].tolist())) == reference_pairs(ends)
    loose = nesting.pair_flow_keys(key, is_start, ts, seq, ordered=False)
    assert sorted(zip(loose.src.tolist(), loose.dst.tolist())) == sorted(zip(pairs.src.tolist(), pairs.dst.tolist()))
    want = defaultdict(lambda: [0, 0])
    for k, s in zip(key.tolist(), is_start.tolist()):
        want[k][0 if s else 1] += 1
    got = {int(key[r]): [int(a), int(b)] for r, a, b in zip(pairs.key_row, pairs.starts, pairs.finishes)}
    assert got == dict(want)


BUNDLED = Path(__file__).resolve().parents[2] / "sample_data" / "bundled"


@pytest.mark.parametrize("src", [PYTORCH_TEXT / "level1", BUNDLED], ids=["real_level1", "bundled"])
def test_batches_do_not_change_the_run(src, tmp_path, monkeypatch, request):
    """Small batches of tracks, big tracks nested in parts, flow keys paired in small batches (each part's ends
    and bound slices read from files of their own, split in one scan; the parts' flows merged in order from files
    of their own): the same run."""
    if not src.is_dir():
        pytest.skip(f"real samples not found at {src}")
    if src == PYTORCH_TEXT / "level1":  # its default ingest: the session's (tests/conftest.py), or a shared one
        one = request.getfixturevalue("level1_db")
    else:
        one = single_file(request.getfixturevalue("tmp_path_factory"), src)[0]  # (tests/shared_runs.py)
    monkeypatch.setattr(nesting, "BATCH_SLICES", 100)  # (the bundled run's biggest track has 300)
    monkeypatch.setattr(nesting, "PART_SLICES", 37)
    monkeypatch.setattr(trace, "PAIR_BATCH_ENDS", 13)
    monkeypatch.setattr(traceflows, "SPLIT_ROWS", 29)  # (several scan batches, each spread over the parts)
    monkeypatch.setattr(traceflows, "MERGE_ROWS", 3)  # (the parts' flows merged across their files' batches)
    split, files = traceflows.part_files, []

    def part_files(*args):
        files.append(split(*args))
        return files[-1]

    monkeypatch.setattr(traceflows, "part_files", part_files)
    ingest_path(src, tmp_path / "many.duckdb")
    assert len(files) == 2 and sum(f is not None for f in files[0]) > 1  # the ends and the bound slices, split
    assert not any(f.exists() for f in files[0] + files[1] if f is not None)  # (each removed once read)
    queries = ["SELECT * FROM slices ORDER BY slice_id", "SELECT * FROM flows ORDER BY flow_id",
               "SELECT * FROM tracks ORDER BY track_id", "SELECT * FROM steps ORDER BY rank, step"]
    with duckdb.connect(str(one), read_only=True) as a, \
            duckdb.connect(str(tmp_path / "many.duckdb"), read_only=True) as b:
        for q in queries:
            assert a.execute(q).fetchall() == b.execute(q).fetchall(), q


def test_the_pairing_lends_its_memory_from_duckdbs_limit_and_gives_it_back(tmp_path, monkeypatch):
    """The flows are paired in numpy while the slices are written beside: DuckDB's limit is lowered by what a part
    holds for as long as the pairing runs (so the two together stay under the process's budget), then restored."""
    monkeypatch.setattr(traceflows, "END_BYTES", 1 << 20)  # (the bundled run's few ends, made to weigh)
    pair, seen = traceflows.pair_parts, {}

    def pair_parts(cur, p, parts, *args):
        seen.setdefault("during", []).append(cur.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        seen["parts"] = parts
        seen["ends"] = cur.execute(f"SELECT count(*) FROM {p}fe").fetchone()[0]
        return pair(cur, p, parts, *args)

    monkeypatch.setattr(traceflows, "pair_parts", pair_parts)
    limit = 512 << 20
    before = trace.TraceLoad.derive

    def derive(self):
        try:
            return before(self)
        finally:
            seen["after"] = self.cur.execute("SELECT current_setting('memory_limit')").fetchone()[0]

    monkeypatch.setattr(trace.TraceLoad, "derive", derive)
    ingest_path(BUNDLED, tmp_path / "run.duckdb", memory_limit="512MiB", workers=1)

    def size(text: str) -> float:
        return duckmem.mib(text) * (1 << 20)
    lent = min(limit - duckmem.LIMIT_FLOOR, traceflows.part_bytes(seen["ends"], seen["parts"]))
    assert seen["ends"] > 0 and lent > 0
    assert all(abs(size(d) - (limit - lent)) < (1 << 20) for d in seen["during"])
    assert abs(size(seen["after"]) - limit) < (1 << 20)
    # a part holding little lends nothing
    with duckdb.connect() as con:
        con.execute("SET memory_limit = '500MB'")
        with duckmem.lent(con, duckmem.LENT_MIN - 1):
            assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "476.8 MiB"


def test_rows_out_of_the_nesting_order_are_sorted_first():
    """``in_order`` tells rows read in the nesting's order (track, ts, longer first, seq) from others, which
    ``nest`` sorts itself: both give the same slices."""
    rnd = random.Random(5)
    rows = [(i, rnd.randint(1, 3), rnd.randint(0, 20), rnd.choice([0, 1, 5, 9])) for i in range(1, 300)]
    ordered = sorted(rows, key=lambda r: (r[1], r[2], -r[3], r[0]))
    cols = [np.array(c, dtype=np.int64) for c in zip(*ordered)]
    assert nesting.in_order(cols[1], cols[2], cols[3], cols[0])
    shuffled = list(ordered)
    rnd.shuffle(shuffled)
    scols = [np.array(c, dtype=np.int64) for c in zip(*shuffled)]
    assert not nesting.in_order(scols[1], scols[2], scols[3], scols[0])
    a = nesting.nest(*cols, presorted=True)
    b = nesting.nest(*scols, presorted=False)
    for field in ("seq", "depth", "parent", "local_id"):
        assert getattr(a, field).tolist() == getattr(b, field).tolist()


def test_without_room_on_disk_each_part_is_a_scan_and_the_run_the_same(tmp_path, tmp_path_factory, monkeypatch):
    """The split of the flow ends into files needs disk: without room for it, each part's ends are a scan of them
    all (as before the split), and the run is the same."""
    one = single_file(tmp_path_factory, BUNDLED)[0]
    monkeypatch.setattr(trace, "PAIR_BATCH_ENDS", 13)
    monkeypatch.setattr(traceflows.shutil, "disk_usage", lambda path: shutil_usage(0))
    monkeypatch.setattr(traceflows, "part_files", lambda *args: pytest.fail("split without room"))
    ingest_path(BUNDLED, tmp_path / "many.duckdb")
    with duckdb.connect(str(one), read_only=True) as a, \
            duckdb.connect(str(tmp_path / "many.duckdb"), read_only=True) as b:
        q = "SELECT * FROM flows ORDER BY flow_id"
        assert a.execute(q).fetchall() == b.execute(q).fetchall()
        assert b.execute("SELECT count(*) FROM flows").fetchone()[0] > 13


def shutil_usage(free: int):
    import shutil
    return shutil._ntuple_diskusage(total=1 << 40, used=(1 << 40) - free, free=free)
