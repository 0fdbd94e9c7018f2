"""Communication time and bandwidth per kind of parallel group (tp, pp, dp, cp, ep, …), for a step or a range.

Contract: :func:`by_kind` maps each collective's group id (``comm_ops`` / ``comm_bandwidth``: communication.json or
analysis.db, every rank's, in a sharded run's ``cluster.duckdb``) to a kind: through ``parallel_groups`` — the id is
a ``parallel_group_info`` key (db export, older text exports) or its ``double_hash`` (text export) — and else by
where the ranks that ran the group's ops sit on the grid (``ingest.strategy.kind_of_members``: the dimension they
differ in). Per kind: the groups, the ops (one per rank and op), the time (Elapse, Transit, Wait; sums over ranks,
and the mean per rank and step), the wait share (wait ÷ (wait + transit)) and the bandwidth per transport
(transit size ÷ transit time, LOCAL copies left out). ``groups`` lists the heaviest groups with their kind, name and
ranks.
"""

from __future__ import annotations

from ascendscope.ingest import strategy as rules
from ascendscope.server.queries import strategy as sq

MAX_GROUPS = 50
RANGE = sq.RANGE.replace("step", "step_id")
MEMBERS_SQL = f"""
SELECT group_id, list(DISTINCT rank ORDER BY rank) AS ranks
FROM comm_ops WHERE NOT coalesce(is_total, false) AND group_id IS NOT NULL AND {RANGE} GROUP BY group_id
"""
# the same, with the stated group each id names (its key, or the key's double hash), matched in SQL: a run of
# 1,024 ranks states some 2,600 groups, whose member lists are not worth reading
NAMED_SQL = f"""
WITH m AS ({MEMBERS_SQL}), p AS (
  SELECT group_key AS gid, kind, group_name FROM parallel_groups
  UNION ALL SELECT hashed_id, kind, group_name FROM parallel_groups
)
SELECT m.group_id, m.ranks, any_value(p.kind) AS kind, any_value(p.group_name) AS group_name
FROM m LEFT JOIN p ON p.gid = m.group_id GROUP BY ALL
"""
OPS_SQL = f"""
SELECT group_id, count(*) AS ops, count(DISTINCT step_id) AS steps, sum(elapse_time_ns) AS elapse_ns,
       sum(transit_time_ns) AS transit_ns, sum(wait_time_ns) AS wait_ns
FROM comm_ops WHERE NOT coalesce(is_total, false) AND group_id IS NOT NULL AND {RANGE} GROUP BY group_id
"""
BANDWIDTH_SQL = f"""
SELECT group_id, transport, sum(transit_size_mb) AS size_mb, sum(transit_time_ns) AS time_ns
FROM comm_bandwidth
WHERE NOT coalesce(is_total, false) AND group_id IS NOT NULL AND transport <> 'LOCAL' AND {RANGE}
GROUP BY group_id, transport
"""


def by_kind(db, step_from: int | None = None, step_to: int | None = None) -> dict:
    """Communication per group kind (module note); cached per run file."""
    return sq.cached(db, "strategy_comm", (step_from, step_to), lambda: _by_kind(db, step_from, step_to))


def _by_kind(db, step_from: int | None, step_to: int | None) -> dict:
    have = sq.tables(db)
    if "comm_ops" not in have:
        return {"available": False, "reason": "no communication data in this run", "kinds": [], "groups": []}
    params = sq._range(step_from, step_to)
    g = sq.load(db)
    members: dict[str, list[int]] = {}
    kinds: dict[str, tuple[str, str | None]] = {}
    rows = (db.rows(NAMED_SQL, params) if "parallel_groups" in have
            else [(gid, ranks, None, None) for gid, ranks in db.rows(MEMBERS_SQL, params)])
    for gid, ranks, kind, name in rows:
        gid = str(gid)
        members[gid] = list(ranks)
        if kind is None:  # no file states it: where its ranks sit
            kind = rules.kind_of_members(members[gid], g.coords, g.sizes, g.world) if g else "unknown"
        kinds[gid] = (kind, name)
    per_kind: dict[str, dict] = {}
    groups = []
    for r in db.dicts(OPS_SQL, params):
        gid = str(r["group_id"])
        kind, name = kinds.get(gid, ("unknown", None))
        k = per_kind.setdefault(kind, {"kind": kind, "groups": 0, "ops": 0, "elapse_ns": 0, "transit_ns": 0,
                                       "wait_ns": 0, "rank_steps": 0, "names": set(), "bandwidth": {}})
        k["groups"] += 1
        k["ops"] += int(r["ops"])
        for key in ("elapse_ns", "transit_ns", "wait_ns"):
            k[key] += int(r[key] or 0)
        k["rank_steps"] += len(members.get(gid, [])) * int(r["steps"] or 1)
        if name:
            k["names"].add(name)
        groups.append({"group_id": gid, "kind": kind, "group_name": name, "ranks": members.get(gid, [])[:64],
                       "size": len(members.get(gid, [])), "ops": int(r["ops"]), "elapse_ns": int(r["elapse_ns"] or 0)})
    if "comm_bandwidth" in have:
        for gid, transport, size_mb, time_ns in db.rows(BANDWIDTH_SQL, params):
            kind, _ = kinds.get(str(gid), ("unknown", None))
            if kind not in per_kind:
                continue
            b = per_kind[kind]["bandwidth"].setdefault(transport, [0.0, 0])
            b[0] += float(size_mb or 0)
            b[1] += int(time_ns or 0)
    out = []
    for k in sorted(per_kind.values(), key=lambda k: -k["elapse_ns"]):
        waited = k["wait_ns"] + k["transit_ns"]
        out.append({**{key: k[key] for key in ("kind", "groups", "ops", "elapse_ns", "transit_ns", "wait_ns")},
                    "group_names": sorted(k["names"]),
                    "mean_per_rank_step_ns": round(k["elapse_ns"] / k["rank_steps"]) if k["rank_steps"] else None,
                    "wait_share": round(k["wait_ns"] / waited, 4) if waited else None,
                    "bandwidth": {t: {"size_mb": round(s, 3), "time_ns": n,
                                      "gbps": round(s / (n / 1e6), 4) if n else None}
                                  for t, (s, n) in sorted(k["bandwidth"].items())}})
    groups.sort(key=lambda x: -x["elapse_ns"])
    return {"available": True, "from_step": step_from, "to_step": step_to, "kinds": out,
            "groups": groups[:MAX_GROUPS], "groups_total": len(groups)}
