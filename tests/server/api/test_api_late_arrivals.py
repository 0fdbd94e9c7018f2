"""/api/runs/{id}/late_arrivals: the last rank of each collective, the wait it caused, why, and the totals per rank,
against runs whose answers are known by construction (sample_data.waits, a synthetic 1,000-rank run), and the
real 2-rank sample (its trace and communication.json)."""

from __future__ import annotations

import pytest

from ascendscope.sample_data.waits import T0_US
from tests.insight_sample import LEAD_NS
from tests.samples import needs_real

US = 1000


def get(client, run_id, path, **params):
    r = client.get(f"/api/runs/{run_id}/late_arrivals/{path}", params=params)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("name", ["waits", "waits_sharded"])
def test_the_late_rank_and_its_cause(client, wait_runs, name):
    run = wait_runs.ids[name]
    t = wait_runs.truth
    steps = get(client, run, "steps")
    assert [s["step"] for s in steps["steps"]] == [1, 2]
    assert all(s["wait_caused_ns"] == t["wait_caused_us"] * US and s["attributed"] == 1 for s in steps["steps"])
    table = get(client, run, "table", step=1)
    assert table["total"] == 1
    row = table["rows"][0]
    assert (row["late_rank"], row["last_rank"], row["ranks"], row["group_size"]) == (2, 2, 4, 4)
    assert row["lead_ns"] == 300 * US and row["max_wait_ns"] == 300 * US
    assert row["wait_caused_ns"] == 3 * 300 * US and row["attributed"] and not row["partial"]
    assert row["first_ns"] == str((T0_US + 190) * US) and row["last_ns"] == str((T0_US + 490) * US)
    cause = row["cause"]
    assert cause["part"] == "computing" and cause["delta_ns"] == 300 * US and cause["lateness_ns"] == 300 * US
    assert cause["top_kernel"] == "MatMul" and cause["top_kernel_ns"] == 400 * US
    # the lateness over the median rank splits exactly into the late start and the parts' differences
    assert sum(cause["deltas"].values()) == cause["lateness_ns"]
    # so the shares of the lateness add up to 1: all of it is computing (MatMul 400 µs against 100 µs)
    assert cause["shares"]["computing"] == 1.0 and sum(cause["shares"].values()) == pytest.approx(1.0)
    # the late rank's window: from the step's start to its arrival at 490 µs
    assert cause["window_ns"] == 490 * US and sum(cause["late_window"].values()) == 490 * US


def test_instance_lists_every_arrival_and_the_late_ranks_window(client, wait_runs):
    run = wait_runs.ids["waits_sharded"]
    inst = get(client, run, "instance", group_id="0", op_name="hcom_allReduce__123_0_1", seq=0, kernels="true",
               rank=2)
    assert inst["arrivals"]["rank"][0] == 2 and sorted(inst["arrivals"]["rank"]) == [0, 1, 2, 3]
    assert dict(zip(inst["arrivals"]["rank"], inst["arrivals"]["wait_ns"])) == {2: 0, 0: 300 * US, 1: 300 * US,
                                                                                 3: 300 * US}
    items = {(i["kind"], i["name"]): i["ns"] for i in inst["window_items"]}
    assert items[("kernel", "MatMul")] == 400 * US and items[("kernel", "Add")] == 50 * US
    shares = {(i["kind"], i["name"]): i["share"] for i in inst["window_items"]}
    assert shares[("kernel", "MatMul")] == pytest.approx(400 / 490)  # of the 490 µs window
    assert ("device", "EVENT_WAIT") in items and ("host", "AscendCL@aclnnMm") in items
    r = client.get(f"/api/runs/{run}/late_arrivals/instance",
                   params={"group_id": "0", "op_name": "hcom_allReduce__123_0_1", "rank": 1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "not_last_rank"
    r = client.get(f"/api/runs/{run}/late_arrivals/instance", params={"group_id": "0", "op_name": "nope"})
    assert r.status_code == 404


@pytest.mark.parametrize("name", ["waits", "waits_sharded"])
def test_of_slice_names_the_instance_of_a_collective_op(client, wait_runs, name):
    """The timeline's Slice Detail: a waiting rank's op waited 300 µs for rank 2; rank 2's own op is the late one;
    a kernel is no collective."""
    run = wait_runs.ids[name]
    inst = get(client, run, "instance", group_id="0", op_name="hcom_allReduce__123_0_1", seq=0)
    ops = dict(zip(inst["arrivals"]["rank"], inst["arrivals"]["slice_id"]))
    waiting = get(client, run, "of_slice", slice_id=ops[0])
    assert waiting["rank"] == 0 and waiting["wait_ns"] == 300 * US
    assert waiting["instance"]["last_rank"] == 2 and waiting["instance"]["cause"]["part"] == "computing"
    assert "arrivals" not in waiting["instance"]
    late = get(client, run, "of_slice", slice_id=ops[2])
    assert late["rank"] == 2 and late["wait_ns"] == 0 and late["instance"]["wait_caused_ns"] == 900 * US
    kernel = get(client, run, "instance", group_id="0", op_name="hcom_allReduce__123_0_1", seq=0, kernels="true",
                 rank=2)["window_items"]
    matmul = next(i["slice_id"] for i in kernel if i["name"] == "MatMul")
    assert get(client, run, "of_slice", slice_id=matmul)["instance"] is None


def test_table_as_csv(client, wait_runs):
    r = client.get(f"/api/runs/{wait_runs.ids['waits']}/late_arrivals/table.csv", params={"step": 2})
    assert r.status_code == 200 and r.headers["X-Row-Count"] == "1"
    head, row = r.text.splitlines()
    assert head.startswith("step,group_id,op_name,seq,ranks,group_size,last_rank")
    assert row.startswith("2,0,hcom_allReduce__123_1_1,0,4,4,2,True,300000,900000,") and "computing" in row


def test_totals_caused_and_suffered(client, wait_runs):
    t = get(client, wait_runs.ids["waits"], "totals")
    got = dict(zip(t["rank"], zip(t["wait_caused_ns"], t["wait_suffered_ns"], t["times_last"])))
    assert got == {2: (2 * 900 * US, 0, 2), 0: (0, 600 * US, 0), 1: (0, 600 * US, 0), 3: (0, 600 * US, 0)}
    assert t["rank"][0] == 2
    one = get(client, wait_runs.ids["waits"], "totals", step=2)
    assert dict(zip(one["rank"], one["wait_suffered_ns"]))[0] == 300 * US


def test_chains_link_each_waiting_op_to_the_late_one(client, wait_runs):
    run = wait_runs.ids["waits_sharded"]
    c = get(client, run, "chains", start_ns=str(T0_US * US), end_ns=str((T0_US + 1000) * US), waiters="0,1")
    assert len(c["instances"]) == 1
    inst = c["instances"][0]
    assert inst["late_rank"] == 2 and inst["late"]["rank"] == 2 and inst["late"]["slice_id"] is not None
    assert [(w["rank"], w["wait_ns"]) for w in inst["waiters"]] == [(0, 300 * US), (1, 300 * US)]
    assert all(w["track_id"] >> 16 == w["rank"] for w in inst["waiters"])  # the shards' id ranges
    empty = get(client, run, "chains", start_ns=str((T0_US + 3000) * US), end_ns=str((T0_US + 4000) * US))
    assert empty["instances"] == []
    r = client.get(f"/api/runs/{run}/late_arrivals/chains", params={"start_ns": 5, "end_ns": 1})
    assert r.status_code == 400


def test_a_1000_rank_run_answers_from_its_cluster_table(client, late_synthetic):
    s = late_synthetic
    steps = get(client, s.run_id, "steps")["steps"]
    assert len(steps) == s.steps and all(x["instances"] == 2 and x["attributed"] == 2 for x in steps)
    for step in (0, 7, 19):
        table = get(client, s.run_id, "table", step=step, limit=10)
        assert table["total"] == 2
        for row in table["rows"]:
            g = int(row["group_id"][1:])
            assert row["late_rank"] == s.late_rank(step, g)
            assert row["ranks"] == len(s.group_ranks(g)) == 500
            assert row["lead_ns"] == LEAD_NS - max(r % 7 for r in s.group_ranks(g) if r != row["late_rank"]) * US \
                + (row["late_rank"] % 7) * US
            assert row["cause"]["part"] == "computing" and row["cause"]["delta_ns"] == LEAD_NS
    totals = get(client, s.run_id, "totals")
    assert len(totals["rank"]) == s.ranks and not totals["truncated"]
    caused = {r: c for r, c in zip(totals["rank"], totals["wait_caused_ns"]) if c}
    assert set(caused) == {s.late_rank(st, g) for st in range(s.steps) for g in (0, 1)}
    assert sum(totals["wait_caused_ns"]) == sum(totals["wait_suffered_ns"])  # every wait is attributed here
    chains = get(client, s.run_id, "chains", start_ns=str(1_736_408_883_000_000_000),
                 end_ns=str(1_736_408_883_000_000_000 + 10**9), waiters="0,1,2,3")
    assert len(chains["instances"]) == 2 * s.steps
    assert all(len(i["waiters"]) <= 4 and i["late"] is not None for i in chains["instances"])


def test_a_run_without_the_table_says_so(client, runs):
    """A run ingested before cluster_collectives existed (the session's single-file copies have it: drop it from a
    copy) answers available: false with a way out, not an error."""
    import shutil

    import duckdb

    from ascendscope.server.runs import RunStore

    store = RunStore(runs.data_dir)
    run = store.create_run("old-layout", "old")
    shutil.copy(runs.dbs["generated"], store.db_path(run.id))
    con = duckdb.connect(str(store.db_path(run.id)))
    con.execute("DROP TABLE cluster_collectives")
    con.close()
    store.set_status(run.id, "ready")
    for path in ("steps", "totals"):
        body = get(client, run.id, path)
        assert body["available"] is False and "ingest its source again" in body["message"]


@needs_real
def test_the_real_sample_rank_1_made_rank_0_wait(client, runs):
    """level1: rank 1 reaches the first allReduce 5.608 ms after rank 0 (both trace_view.json HCCL lanes); rank 0's
    communication.json has it waiting there (Synchronization Time 5.616 ms, its own clock rounding)."""
    run = runs.ids["level1"]
    table = get(client, run, "table", step=50)
    first = next(r for r in table["rows"] if r["op_name"] == "hcom_allReduce__586_0_1")
    assert first["late_rank"] == 1 and first["wait_caused_ns"] == 5_607_716
    assert first["group_id"] == "17522688603477080586"
    c = first["cause"]
    assert sum(c["deltas"].values()) == c["lateness_ns"] == 5_607_716
    assert c["deltas"]["late_start"] == 2_127_370  # ProfilerStep#50 began 2.127 ms later on rank 1
    assert c["part"] == "preparing"
    totals = get(client, run, "totals")
    assert totals["rank"][0] == 1 and totals["wait_caused_ns"][0] == 5_607_716


@pytest.fixture(scope="module")
def big_kernel_run(runs, tmp_path_factory):
    """Every rank runs SoftmaxV2 for 400 µs; rank 1's Add lasts 100 µs longer: Add made it late, not SoftmaxV2."""
    from tests.insight_sample import add_generated_run

    return add_generated_run(runs.data_dir, tmp_path_factory.mktemp("big-kernel"), "waits_big", ranks=4,
                             late_rank=1, extra_us=100, big_us=400, late_kernel="Add")


def test_the_kernel_that_made_the_late_rank_late_is_not_its_biggest(client, big_kernel_run):
    run, t = big_kernel_run
    row = get(client, run, "table", step=1)["rows"][0]
    c = row["cause"]
    assert row["late_rank"] == t["late_rank"] == 1 and row["lead_ns"] == t["lead_us"] * US == 100 * US
    assert c["part"] == "computing" and c["delta_ns"] == 100 * US
    # the kernel by kernel comparison with the reference rank's window names the lengthened one
    assert (c["excess_kernel"], c["excess_kernel_ns"], c["excess_kernel_by"]) == (t["late_kernel"],
                                                                                   t["late_kernel_excess_us"] * US,
                                                                                   "name")
    assert (c["excess_kernel_late_ns"], c["excess_kernel_ref_ns"]) == (150 * US, 50 * US)
    assert not c["excess_kernel_bound"]
    # the most time in the window stays, as a second figure: the kernel every rank runs as long
    assert (c["top_kernel"], c["top_kernel_ns"]) == (t["most_time_kernel"], t["most_time_kernel_us"] * US)
    assert c["top_kernel"] == "SoftmaxV2"
    inst = get(client, run, "instance", group_id="0", op_name="hcom_allReduce__123_0_1", seq=0)
    assert inst["cause"]["excess_kernel"] == "Add"
    ops = dict(zip(inst["arrivals"]["rank"], inst["arrivals"]["slice_id"]))
    waiting = get(client, run, "of_slice", slice_id=ops[0])
    assert waiting["instance"]["cause"]["excess_kernel"] == "Add"  # the timeline's Slice Detail
    head, line = client.get(f"/api/runs/{run}/late_arrivals/table.csv", params={"step": 1}).text.splitlines()
    got = dict(zip(head.split(","), line.split(",")))
    assert (got["excess_kernel"], got["excess_kernel_ns"], got["top_kernel"]) == ("Add", "100000", "SoftmaxV2")


def test_the_excess_kernel_by_type_when_no_name_is_shared():
    from ascendscope.server.queries.late_arrivals import excess_kernel

    late = '[["SoftmaxV2_r1", "SoftmaxV2", 400], ["Add_r1", "Add", 150]]'
    ref = '[["SoftmaxV2_r0", "SoftmaxV2", 400], ["Add_r0", "Add", 50]]'
    assert excess_kernel(late, ref, 2) == {"name": "Add", "by": "type", "excess_ns": 100, "late_ns": 150,
                                           "ref_ns": 50, "bound": False}
    # a name the reference's list left out (truncated): at most its shortest listed time
    got = excess_kernel('[["A", "t", 400], ["B", "t", 300]]', '[["A", "t", 390], ["C", "t", 100]]', 5)
    assert (got["name"], got["excess_ns"], got["ref_ns"], got["bound"]) == ("B", 200, None, True)
    assert excess_kernel('[["A", "t", 40]]', '[["A", "t", 50]]', 1) is None
