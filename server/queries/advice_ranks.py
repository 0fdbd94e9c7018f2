"""The cross-rank checks of the advice (``advice.py`` runs them), both under **slow_rank**: the rank the others
wait for in collectives, and per transport the links well below their transport's median or typical bandwidth."""

from __future__ import annotations

from ascendscope.server.queries import communication as cq
from ascendscope.server.queries import links, ratio
from ascendscope.server.queries.advice_core import MAX_INSTANCES, Advisor, as_int, fmt_ms, fmt_pct

SLOW_RANK_SPREAD = 0.05  # of the most-waiting rank's elapse time
SLOW_LINK_RATIO = 0.5
TYPICAL_GBPS = {"HCCS": 18.0, "SDMA": 18.0, "RDMA": 12.5, "PCIE": 20.0}  # usual achieved bandwidth per transport

LINK_OPS_SQL = """
SELECT o.op_name, o.start_ns, o.elapse_time_ns, b.bandwidth_gbps, b.transit_size_mb, b.transit_time_ns,
       count(*) OVER () AS n
FROM comm_bandwidth b JOIN comm_ops o ON o.rank = b.rank AND o.step = b.step AND o.op_key = b.op_key
     AND NOT o.is_total
WHERE b.rank = ? AND b.transport = ? AND NOT b.is_total AND b.transit_size_mb > 0 AND b.transit_time_ns > 0
ORDER BY b.bandwidth_gbps, o.start_ns LIMIT ?
"""
WAIT_OPS_SQL = """
SELECT op_name, start_ns, elapse_time_ns, wait_time_ns, synchronization_time_ns, count(*) OVER () AS n
FROM comm_ops WHERE rank = ? AND NOT is_total AND start_ns IS NOT NULL
ORDER BY coalesce(wait_time_ns, 0) + coalesce(synchronization_time_ns, 0) DESC, start_ns LIMIT ?
"""


def slow_rank(a: Advisor) -> None:
    totals = cq.rank_totals(a.db)
    rows = [r for r in totals["rows"] if not r["elapse_only"]]  # a rank of elapse only says nothing of waits
    if len(rows) < 2:
        return
    waits = {r["rank"]: r["wait_time_ns"] + r["synchronization_time_ns"] for r in rows}
    most = max(rows, key=lambda r: (waits[r["rank"]], -r["rank"]))
    least = min(rows, key=lambda r: (waits[r["rank"]], r["rank"]))
    spread = waits[most["rank"]] - waits[least["rank"]]
    if not most["elapse_time_ns"] or spread <= SLOW_RANK_SPREAD * most["elapse_time_ns"]:
        return
    rk = most["rank"]
    ops = a.db.rows(WAIT_OPS_SQL, [rk, MAX_INSTANCES])
    matches = links.match_slices(a.db, rk, [(o[1], o[0]) for o in ops], links.COMM_OP_TOLERANCE_NS,
                                 prefer=("communication", "hardware")) if a.traced.get(rk) else {}
    inst = [a.instance(rk, matches.get((int(s), name)), name, s, el, wait_time_ns=as_int(w),
                       synchronization_time_ns=as_int(sy), detail=f"wait {fmt_ms(w)} + sync {fmt_ms(sy)}")
            for name, s, el, w, sy, _ in ops]
    share = ratio(spread, most["elapse_time_ns"])
    a.add("slow_rank", "wait", "warning" if share > 4 * SLOW_RANK_SPREAD else "info",
          f"Rank {least['rank']} is the slow rank: rank {rk} waits {fmt_ms(spread)} more for it",
          f"In collectives rank {rk} waits the most: Wait {fmt_ms(most['wait_time_ns'])} + Synchronization "
          f"{fmt_ms(most['synchronization_time_ns'])} over {most['ops']} ops ({fmt_ms(most['elapse_time_ns'])} of "
          f"communication), against {fmt_ms(waits[least['rank']])} on rank {least['rank']}, which waits the least: "
          f"the others wait for rank {least['rank']} to arrive ({fmt_ms(spread)}, {fmt_pct(share)} of rank {rk}'s "
          f"communication time). Look at what rank {least['rank']} does before its collectives (computation, "
          "host dispatch, data loading).",
          rank=None, source={"table": "comm_ops", "file": a.source_name("comm_ops", least["rank"])},
          instances=inst,
          instance_count=int(ops[0][5]) if ops else 0,
          metrics={"waiting_rank": rk, "slow_rank": least["rank"], "spread_ns": spread, "share": share,
                   "per_rank": [{"rank": r["rank"], "ops": r["ops"], "elapse_time_ns": r["elapse_time_ns"],
                                 "wait_time_ns": r["wait_time_ns"],
                                 "synchronization_time_ns": r["synchronization_time_ns"]} for r in rows]})


def slow_links(a: Advisor) -> None:
    for link in cq.slow_links(a.db):
        t, bw, median = link["transport_type"], link["bandwidth_gbps"], link["median_gbps"]
        typical = TYPICAL_GBPS.get(t)
        below_median = link["links"] > 1 and bw < SLOW_LINK_RATIO * median
        below_typical = typical is not None and bw < SLOW_LINK_RATIO * typical
        if not (below_median or below_typical):
            continue
        src = int(link["src_rank"])
        ops = a.db.rows(LINK_OPS_SQL, [src, t, MAX_INSTANCES]) if src in a.traced else []
        matches = links.match_slices(a.db, src, [(o[1], o[0]) for o in ops], links.COMM_OP_TOLERANCE_NS,
                                     prefer=("communication", "hardware")) if a.traced.get(src) else {}
        inst = [a.instance(src, matches.get((int(s), name)), name, s, el, bandwidth_gbps=b,
                           transit_size_mb=mb, detail=f"{t} {b:.2f} GB/s, {mb:.2f} MB")
                for name, s, el, b, mb, _tt, _ in ops]
        against = [f"{bw / median:.0%} of the median {median:.2f} GB/s of {link['links']} {t} links"
                   if link["links"] > 1 else None,
                   f"{bw / typical:.0%} of the typical {typical:.1f} GB/s of {t}" if typical else None]
        a.add("slow_rank", f"link-{t}", "warning",
              f"Slow {t} link {src} → {link['dst_rank']}: {bw:.2f} GB/s",
              f"The {t} link from rank {src} to rank {link['dst_rank']} moved {link['transit_size_mb']:.2f} MB "
              f"in {fmt_ms(link['transit_time_ns'])}: {bw:.2f} GB/s, " + " and ".join(a for a in against if a)
              + ". Check that link (cabling, contention with other traffic, its NIC or HCCS port); the "
              f"instances are rank {src}'s ops that used {t}, slowest first.",
              rank=None, source={"table": "comm_matrix", "file": a.source_name("comm_matrix", src)},
              instances=inst, instance_count=int(ops[0][6]) if ops else 0,
              metrics={**link, "typical_gbps": typical, "below_median": below_median,
                       "below_typical": below_typical})
