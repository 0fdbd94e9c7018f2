"""``ascendscope bench suite --quick``: every row of the comparison is there, its numbers are positive and its
ratios are computed from them; and the child-process measurement it rests on (no timing asserts).

The smoke run asks for one of the quick sizes (8 ranks: every tool, a multi-rank run) and one viewport client
count: each further size or client count runs the same code again, on a server and a browser of its own."""

import json
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from ascendscope.bench import suite, tools
from ascendscope.bench.measure import run_measured
from ascendscope.server.cli import build_parser

PEERS = ("msprof_analyze", "tb_profiler_ascend")
SIZE = next(s for s in suite.QUICK_SIZES if s[0] > 1)  # (ranks, MB per rank, tools)
CLIENTS = [4]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("suite")
    out = tmp / "suite.json"
    argv = ["bench", "suite", "--quick", "--sizes", f"{SIZE[0]}x{SIZE[1]:g}", "--clients", *map(str, CLIENTS),
            "--seconds", "1", "--json", str(out), "--cache", str(tmp / "cache")]
    proc = subprocess.run([sys.executable, "-m", "ascendscope.server.cli", *argv], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_every_size_and_tool_has_a_row(quick):
    report, text = quick
    assert [s["ranks"] for s in report["sizes"]] == [SIZE[0]]
    assert set(SIZE[2]) == set(suite.TOOLS)  # (--sizes runs every tool, as --quick does on this size)
    for size in report["sizes"]:
        assert set(size["ingest"]) == set(suite.TOOLS)
        assert size["ingest"]["ours"]["status"] == "ok"
        assert size["ingest"]["floor"]["status"] == "ok"
        assert size["ingest"]["ours_single"]["status"] in ("ok", "skipped")
        # paint and viewport are measured on what ours wrote (the sharded layout, when this version has it)
        assert size["served"] == "ours"
        for peer in PEERS:  # the peers are an optional extra
            assert size["ingest"][peer]["status"] in ("ok", "not installed"), size["ingest"][peer]
        for tool in suite.TOOLS:
            assert re.search(rf"^\s*{size['ranks']}\s+\S+ {tool}\b", text, re.M), f"no table line for {tool}"
    assert report["ray"]["status"] == "not asked"
    # how long the whole suite took (generation included), in the report and the table's first line
    assert report["seconds"] > 0 and f"{report['seconds'] / 60:.1f} min" in text.splitlines()[0]


def test_numbers_are_positive_and_ratios_come_from_them(quick):
    report, _ = quick
    for size in report["sizes"]:
        rows = size["ingest"]
        ours = rows["ours"]
        for tool, row in rows.items():
            if row["status"] != "ok":
                continue
            for key in ("input_mb", "wall_s", "cpu_s", "mb_per_s", "peak_rss_mb", "tree_rss_mb"):
                assert row[key] > 0, (tool, key, row)
            assert row["tree_rss_mb"] >= row["peak_rss_mb"] * 0.999, (tool, row)
            assert row["mb_per_s"] == pytest.approx(row["input_mb"] / row["wall_s"], rel=0.01, abs=0.001)
            assert row["ours_x"] == pytest.approx(ours["mb_per_s"] / row["mb_per_s"], rel=0.01, abs=0.001)
        assert ours["ours_x"] == 1
        # each tool read what it was given: the floor every event of every trace, ours every rank
        assert rows["floor"]["detail"] == {"traces": size["ranks"], "events": size["events"]}
        assert rows["ours"]["detail"]["ranks"] == size["ranks"]
        assert rows["floor"]["input_mb"] == size["trace_mb"] and ours["input_mb"] == size["input_mb"]
        if rows["tb_profiler_ascend"]["status"] == "ok":  # one profile per rank, plus the distributed view
            assert rows["tb_profiler_ascend"]["detail"]["profiles"] >= size["ranks"]


def test_paint_viewport_and_targets(quick):
    report, _ = quick
    for size in report["sizes"]:
        paint = size["first_paint"]
        if "error" not in paint or "chromium" not in paint["error"]:
            assert paint["cold_ms"] > 0 and paint["warm_ms"] > 0 and paint["slices_drawn"] > 0, paint
        assert [v["clients"] for v in size["viewport"]] == CLIENTS
        for v in size["viewport"]:
            assert v["requests"] > 0 and v["p95_ms"] > 0 and v["req_per_s"] > 0
            assert v["errors"] == 0, v  # wrk: socket errors, timeouts and non-2xx answers
    targets = {t["target"]: t for t in report["targets"]}
    for size in report["sizes"]:
        rows = size["ingest"]
        floor = targets[f"ingest ≥ 0.6 × the read_json floor ({size['ranks']} rank(s))"]
        assert floor["got"] == round(rows["ours"]["mb_per_s"] / rows["floor"]["mb_per_s"], 2)
        assert floor["met"] == (floor["got"] >= 0.6)
        # ours was watched: when the views could first answer, when rank 0 could be opened, when it was done
        seen = rows["ours"]["insight"]
        assert 0 < seen["cluster_view_s"] <= seen["rank0_s"] <= seen["complete_s"], seen
        moved = rows["ours"]["progress"]
        assert moved["events"] > 0 and moved["first_move_s"] is not None
        assert 0 <= moved["longest_still_s"] <= rows["ours"]["wall_s"] + 0.5
        rss = targets[f"peak RSS per worker ≤ 1.5 GB ({size['ranks']} rank(s))"]
        assert rss["got"] == rows["ours"]["peak_rss_mb"] and rss["met"] == (rss["got"] <= 1536)
        # the generated runs load whole: a measurement that lost a file would say so
        loaded = targets[f"every file loaded ({size['ranks']} rank(s); not loaded: none)"]
        assert loaded["got"] == 0 and loaded["met"] and rows["ours"]["detail"]["not_loaded"] == []
    assert set(suite.table(report).splitlines()) >= {f"{'met ' if t['met'] else 'GAP '} {t['target']}: {t['got']} "
                                                      f"(target {t['want']})" for t in report["targets"]}


def test_bench_without_a_name_runs_the_suite():
    assert build_parser().parse_args(["bench"]).name == "suite"
    args = build_parser().parse_args(["bench", "suite", "--quick", "--json", "x.json"])
    assert (args.name, args.options) == ("suite", ["--quick", "--json", "x.json"])


HOLD = """
    import subprocess, sys, time
    block = bytearray(150 * 2**20)
    if sys.argv[1:] == ["parent"]:
        kid = subprocess.Popen([sys.executable, __file__, "child"])
        kid.wait()
    else:
        time.sleep(1.0)
"""


def test_measure_counts_the_largest_process_and_the_whole_tree(tmp_path):
    # a child holding ~150 MB that starts a grandchild holding ~150 MB at the same time
    script = tmp_path / "hold.py"
    script.write_text(textwrap.dedent(HOLD))
    res = run_measured([sys.executable, str(script), "parent"], timeout_s=60)
    assert res["rc"] == 0 and not res["timed_out"] and res["cpu_s"] > 0
    assert 150 <= res["peak_rss_mb"] < 290  # one process's block, not both
    assert res["tree_rss_mb"] >= 300  # both blocks at once


def test_measure_does_not_count_the_measuring_process(tmp_path):
    # Linux starts a child's ru_maxrss at its parent's peak (it is kept across the exec): a big process measuring a
    # small command must still see the command's own figure (this process holds ~400 MB while it measures)
    script = tmp_path / "hold.py"
    script.write_text(textwrap.dedent(HOLD))
    ballast = bytearray(400 * 2**20)
    res = run_measured([sys.executable, str(script), "child"], timeout_s=60)
    assert res["rc"] == 0 and 150 <= res["peak_rss_mb"] < 290 and res["tree_rss_mb"] < 290
    del ballast
    failed = run_measured([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], timeout_s=60)
    assert failed["rc"] == -9 and not failed["timed_out"]
    missing = run_measured(["no-such-command-here"], timeout_s=60)
    assert missing["rc"] != 0 and "no-such-command-here" in missing["stderr"]


def test_measure_ends_the_whole_tree_at_the_timeout(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = tmp_path / "hang.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(kid.pid))
        time.sleep(600)
    """))
    res = run_measured([sys.executable, str(script)], timeout_s=2)
    assert res["timed_out"] and res["rc"] != 0
    assert not _running(int(pid_file.read_text()))


def _running(pid: int, wait_s: float = 10) -> bool:
    """Whether ``pid`` still runs after up to ``wait_s`` (a zombie waiting for its new parent has ended)."""
    try:
        proc = psutil.Process(pid)
        proc.wait(wait_s)
    except (psutil.NoSuchProcess, psutil.TimeoutExpired):
        pass
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_tb_view_names_rank_folders_as_the_loader_expects(tmp_path):
    src = tmp_path / "run"
    for r in range(3):
        (src / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    view = tools.tb_view(src, tmp_path / "view")
    names = sorted(p.name for p in view.iterdir())
    # torch_npu's {host}_{pid}_{time}_ascend_pt form, the only one torch-tb-profiler-ascend's loader takes
    assert all(re.match(r"^(.*?)_(\d+(\.\d+)?)_ascend_pt$", n) for n in names), names
    assert {p.resolve() for p in view.iterdir()} == {p.resolve() for p in src.iterdir()}


def test_first_paint_waits_for_a_drawn_slice():
    """A page can settle (ready, nothing pending) before it has asked for any slice, as the timeline of a 64-rank
    run did: first paint is when slices are drawn, not that moment."""
    from ascendscope.bench import paint

    if not paint.CHROMIUM.exists():
        pytest.skip(f"{paint.CHROMIUM} is missing (apt-get install chromium); CI installs it")
    from playwright.sync_api import sync_playwright

    page = ("<script>window.__timeline = {ready: true, error: null, pending: () => 0, stats: {slices: 0}};"
            "setTimeout(() => { window.__timeline.stats = {slices: 7}; }, 300);</script>")
    def measure() -> dict:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(paint.CHROMIUM), headless=True, args=paint.ARGS)
            try:
                return paint._paint(browser, "data:text/html," + page, reloads=0, timeout_s=30)
            finally:
                browser.close()

    # in a thread of its own, as the bench runs it: a browser test before this one may have left this thread a
    # running event loop (its session browser), where Playwright's sync API refuses to start
    with ThreadPoolExecutor(1) as pool:
        res = pool.submit(measure).result(timeout=120)
    assert res["slices_drawn"] == 7, res
