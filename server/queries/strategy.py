"""The parallel strategy of a run: the rank grid coloured by a step metric (``grid``), read from the whole-run
tables ``ingest/strategy.py`` writes (``parallel_strategy``, ``rank_grid``, ``parallel_groups``) and the cluster
tables (``cluster_steps``, ``cluster_collectives``), so a sharded run answers from its ``cluster.duckdb`` alone.

Contract: :func:`load` gives the grid of the default order, or — with a picked ``order`` or ``sizes`` — the grid
``ingest.strategy.solve`` computes from the ranks' metadata (the one rule, shared with the ingest). :func:`rank_metrics`
gives every rank's mean per step of each metric over a step range: ``step`` (Computing + Communication(Not
Overlapped) + Free), ``computing``, ``exposed_comm``, ``free`` (``cluster_steps``) and ``wait_caused`` (the wait the
rank caused as the last rank of collectives, by the late-arrival rule of ``server.queries.late_arrivals``). A run
ingested before these tables existed answers ``available: false``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ascendscope.ingest import strategy as rules
from ascendscope.server.queries import QueryError
from ascendscope.server.queries import late_arrivals as la

METRICS = {"step": "step_ns", "computing": "computing_ns", "exposed_comm": "exposed_comm_ns", "free": "free_ns",
           "wait_caused": "wait_caused_ns"}
# the run's own tables and views (a sharded run's are views of the connection's main schema): the catalog functions
# of the current database, not information_schema, which lists every attached shard's tables too (70 ms at 1,024)
TABLES_SQL = """
SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = current_schema()
UNION ALL
SELECT view_name FROM duckdb_views() WHERE database_name = current_database() AND schema_name = current_schema()
                                     AND NOT internal
"""
STRATEGY_SQL = "SELECT * FROM parallel_strategy LIMIT 1"
GRID_SQL = "SELECT rank, dp, pp, tp, cp, ep, source, in_run FROM rank_grid ORDER BY rank"
GROUPS_SQL = "SELECT group_key, hashed_id, group_name, kind, ranks, stated_by FROM parallel_groups"
META_SQL = "SELECT rank, folder, profiler_metadata FROM ranks ORDER BY rank"
STEPS_SQL = "SELECT DISTINCT step FROM cluster_steps WHERE step IS NOT NULL ORDER BY step"
RANGE = "(CAST(? AS BIGINT) IS NULL OR step >= ?) AND (CAST(? AS BIGINT) IS NULL OR step <= ?)"
MEANS_SQL = f"""
SELECT rank, count(*) AS steps, avg(step_ns) AS step_ns, avg(computing_ns) AS computing_ns,
       avg(exposed_comm_ns) AS exposed_comm_ns, avg(free_ns) AS free_ns
FROM cluster_steps WHERE {RANGE} GROUP BY rank
"""
# the wait each rank caused in the range, per step (the late-arrival instances of its steps)
WAIT_SQL = la.INSTANCES_CTE.format(keys=RANGE) + """
SELECT late_rank AS rank, sum(wait_caused_ns) AS wait_caused_ns, count(DISTINCT step) AS steps
FROM att WHERE attributed GROUP BY late_rank
"""
WAIT_STEPS_SQL = f"SELECT count(DISTINCT step) FROM cluster_collectives WHERE {RANGE}"


@dataclass
class Grid:
    """The grid of a run: sizes, the order used, and per rank (in rank order) its coordinates and source
    (``groups``: the stated groups when solved again; else :func:`groups` reads them). Shared between requests
    (cached): only its lazily built :meth:`keys` change, the same way each time."""

    sizes: dict[str, int]
    world: int
    order: str
    order_source: str
    sizes_source: str
    microbatches: int | None
    pp_schedule: str | None
    warnings: list[str]
    ranks: list[int]
    coords: dict[int, dict[str, int]]
    source: dict[int, str]
    in_run: set[int]
    groups: list[dict] | None

    def __post_init__(self) -> None:
        self._keys: dict[str, dict[int, tuple]] = {}

    def keys(self, without: str) -> dict[int, tuple]:
        """rank -> its coordinates but ``without`` (ep: its expert-parallel group's: tp, cp, pp, dp ÷ ep): the
        ranks sharing one form one group of that dimension."""
        if without not in self._keys:
            if without == "ep":
                ep = max(1, self.sizes["ep"])
                self._keys[without] = {r: (c["tp"], c["cp"], c["pp"], c["dp"] // ep) for r, c in self.coords.items()}
            else:
                dims = [d for d in ("dp", "pp", "tp", "cp") if d != without]
                self._keys[without] = {r: tuple(c[d] for d in dims) for r, c in self.coords.items()}
        return self._keys[without]

    def dims(self) -> list[str]:
        return [d for d in ("pp", "tp", "cp", "ep", "dp") if self.sizes.get(d, 1) > 1]


def tables(db) -> set[str]:
    return {r[0] for r in db.rows(TABLES_SQL)}


def cached(db, kind: str, params: tuple, compute):
    """``compute()``, once per run file for concurrent and later requests of the same ``kind`` and ``params``
    (``RunDb.shared``); a plain runner (tests, scripts) computes it each time."""
    shared = getattr(db, "shared", None)
    if shared is None:
        return compute()
    return shared(kind, params, [0], lambda _: {0: compute()})[0]


def groups(db) -> list[dict]:
    """The groups the files state (``parallel_groups``)."""
    if "parallel_groups" not in tables(db):
        return []
    return [{"group_key": k, "hashed_id": h, "group_name": n, "kind": kind, "ranks": list(r or []),
             "stated_by": list(b or [])} for k, h, n, kind, r, b in db.rows(GROUPS_SQL)]


def _range(step_from: int | None, step_to: int | None) -> list:
    if step_from is not None and step_to is not None and step_from > step_to:
        raise QueryError("bad_range", "from_step must not be after to_step")
    return [step_from, step_from, step_to, step_to]


def load(db, order: str | None = None, sizes: dict | None = None) -> Grid | None:
    """The run's grid (None when the run has no strategy tables): as ingested, or solved again for a picked
    ``order`` / ``sizes``; cached per run file."""
    key = (order, tuple(sorted((sizes or {}).items())))
    return cached(db, "strategy_grid", key, lambda: _load(db, order, sizes))


def _load(db, order: str | None, sizes: dict | None) -> Grid | None:
    if "rank_grid" not in tables(db):
        return None
    if order or sizes:
        metas, ranks, folders = {}, [], {}
        for rank, folder, text in db.rows(META_SQL):
            ranks.append(int(rank))
            folders[int(rank)] = folder
            try:
                meta = json.loads(text) if isinstance(text, str) else text
            except ValueError:
                continue
            if isinstance(meta, dict):
                metas[int(rank)] = meta
        try:
            sol = rules.solve(metas, ranks, order=order, sizes=sizes, folders=folders)
        except ValueError as exc:
            raise QueryError("bad_strategy", str(exc)) from None
        coords = {r: c for r, (c, _) in sol.grid.items()}
        return Grid(sol.sizes, sol.world, sol.order, sol.order_source, sol.sizes_source, sol.microbatches,
                    sol.pp_schedule, sol.warnings, sorted(sol.grid), coords,
                    {r: s for r, (_, s) in sol.grid.items()}, sol.in_run, sol.groups)
    head = db.dicts(STRATEGY_SQL)
    if not head:
        return None
    s = head[0]
    rows = db.rows(GRID_SQL)
    return Grid({d: int(s[d]) for d in rules.DIMS}, int(s["world_size"]), s["order"], s["order_source"],
                s["sizes_source"], s["microbatches"], s["pp_schedule"], json.loads(s["warnings"] or "[]"),
                [r[0] for r in rows], {r[0]: dict(zip(("dp", "pp", "tp", "cp", "ep"), r[1:6])) for r in rows},
                {r[0]: r[6] for r in rows}, {r[0] for r in rows if r[7]}, None)


def steps(db) -> list[int]:
    return [r[0] for r in db.rows(STEPS_SQL)] if "cluster_steps" in tables(db) else []


def rank_metrics(db, step_from: int | None = None, step_to: int | None = None, *,
                 wait: bool = True) -> dict[int, dict]:
    """rank -> its mean per step of every metric (ns, floats) over the range, and ``steps``; cached per run
    file."""
    return cached(db, "strategy_metrics", (step_from, step_to, wait),
                  lambda: _rank_metrics(db, step_from, step_to, wait))


def _rank_metrics(db, step_from: int | None, step_to: int | None, wait: bool) -> dict[int, dict]:
    have = tables(db)
    params = _range(step_from, step_to)
    out: dict[int, dict] = {}
    if "cluster_steps" in have:
        for r in db.dicts(MEANS_SQL, params):
            out[int(r["rank"])] = {k: (None if r[k] is None else float(r[k])) for k in METRICS.values()
                                   if k != "wait_caused_ns"} | {"steps": int(r["steps"])}
    if wait and "cluster_collectives" in have:
        n_steps = max(1, int(db.rows(WAIT_STEPS_SQL, params)[0][0] or 0))
        for m in out.values():
            m["wait_caused_ns"] = 0.0
        for rank, caused, _ in db.rows(WAIT_SQL, params + [la.MIN_LEAD_NS, la.MIN_LEAD_NS]):
            out.setdefault(int(rank), {"steps": 0})["wait_caused_ns"] = float(caused or 0) / n_steps
    return out


def parse_sizes(tp: int | None, pp: int | None, dp: int | None, cp: int | None, ep: int | None) -> dict | None:
    given = {k: v for k, v in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("ep", ep)) if v is not None}
    if any(v < 1 for v in given.values()):
        raise QueryError("bad_strategy", "every size must be at least 1")
    return given or None


def unavailable(reason: str) -> dict:
    return {"available": False, "reason": reason}


NO_TABLES = ("this run was ingested before the parallel strategy was read (Retry the ingest), or it has no "
             "ranks")


def grid(db, metric: str = "step", step_from: int | None = None, step_to: int | None = None,
         order: str | None = None, sizes: dict | None = None) -> dict:
    """Every rank of the world with its coordinates, source and the metric's mean per step (ns, null without
    data), columnar; the sizes, order and where they come from."""
    if metric not in METRICS:
        raise QueryError("bad_metric", f"metric must be one of: {', '.join(METRICS)}")
    g = load(db, order, sizes)
    if g is None:
        return unavailable(NO_TABLES)
    values = rank_metrics(db, step_from, step_to, wait=metric == "wait_caused")
    col = METRICS[metric]
    return {
        "available": True, "metric": metric, "from_step": step_from, "to_step": step_to, "steps": steps(db),
        "sizes": g.sizes, "world": g.world, "order": g.order, "order_source": g.order_source,
        "sizes_source": g.sizes_source, "microbatches": g.microbatches, "pp_schedule": g.pp_schedule,
        "warnings": g.warnings, "dims": g.dims(),
        "counts": {s: sum(1 for r in g.ranks if g.source[r] == s) for s in ("metadata", "peers", "inferred")},
        "rank": g.ranks, **{d: [g.coords[r][d] for r in g.ranks] for d in rules.DIMS},
        "source": [g.source[r] for r in g.ranks], "in_run": [r in g.in_run for r in g.ranks],
        "value": [None if (v := values.get(r, {}).get(col)) is None else int(round(v)) for r in g.ranks],
    }
