"""The parallel strategy's whole-run tables (``parallel_strategy``, ``rank_grid``, ``parallel_groups``; columns in
docs/schema.md): :func:`build` reads every rank's profiler_metadata.json from a ranks table, places the ranks by
``ingest.strategy.solve`` and writes its answer. Built once over every rank, never per shard: by the single-file
ingest (``pipeline.load_cluster_analysis``) and by the sharded ingest's cluster stage (``shards.ClusterTables``)."""

from __future__ import annotations

import json

from .strategy import DIMS, Solution, label, solve

GRID_DDL = ("CREATE OR REPLACE TABLE rank_grid (rank INTEGER, dp INTEGER, pp INTEGER, tp INTEGER, cp INTEGER, "
            "ep INTEGER, source VARCHAR, in_run BOOLEAN)")
GROUPS_DDL = ("CREATE OR REPLACE TABLE parallel_groups (group_key VARCHAR, hashed_id VARCHAR, group_name VARCHAR, "
              "kind VARCHAR, ranks INTEGER[], size INTEGER, stated_by INTEGER[])")
STRATEGY_DDL = ("CREATE OR REPLACE TABLE parallel_strategy (world_size INTEGER, tp INTEGER, pp INTEGER, dp INTEGER, "
                "cp INTEGER, ep INTEGER, sizes_source VARCHAR, \"order\" VARCHAR, order_source VARCHAR, "
                "ranks_metadata INTEGER, ranks_peers INTEGER, ranks_inferred INTEGER, microbatches INTEGER, "
                "pp_schedule VARCHAR, warnings JSON)")
TABLES = ("parallel_strategy", "rank_grid", "parallel_groups")
RANKS_SQL = "SELECT rank, folder, profiler_metadata FROM {table} ORDER BY rank"


def read_ranks(con, table: str = "ranks") -> tuple[dict[int, dict], list[int], dict[int, str], list[str]]:
    """(metadata per rank, ranks, folders, problems) from a ranks table's ``profiler_metadata`` JSON."""
    metas, ranks, folders, problems = {}, [], {}, []
    for rank, folder, text in con.execute(RANKS_SQL.format(table=table)).fetchall():
        if rank is None:
            continue
        ranks.append(int(rank))
        folders[int(rank)] = folder
        if not text:
            continue
        try:
            meta = json.loads(text) if isinstance(text, str) else text
        except ValueError as exc:
            problems.append(f"{label(int(rank), folders)}: not JSON ({exc}), ignored")
            continue
        if isinstance(meta, dict):
            metas[int(rank)] = meta
    return metas, ranks, folders, problems


def write(con, sol: Solution) -> None:
    """The three tables of ``sol`` into ``con``."""
    con.execute(STRATEGY_DDL)
    con.execute(GRID_DDL)
    con.execute(GROUPS_DDL)
    counts = sol.counts()
    con.execute("INSERT INTO parallel_strategy VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [sol.world, sol.sizes["tp"], sol.sizes["pp"], sol.sizes["dp"], sol.sizes["cp"], sol.sizes["ep"],
                 sol.sizes_source, sol.order, sol.order_source, counts["metadata"], counts["peers"],
                 counts["inferred"], sol.microbatches, sol.pp_schedule, json.dumps(sol.warnings)])
    ranks = sorted(sol.grid)
    if ranks:
        cols = [ranks] + [[sol.grid[r][0][d] for r in ranks] for d in DIMS] + [[sol.grid[r][1] for r in ranks],
                                                                              [r in sol.in_run for r in ranks]]
        con.execute("INSERT INTO rank_grid SELECT " + ", ".join("unnest(?)" for _ in cols), cols)
    for g in sol.groups:
        con.execute("INSERT INTO parallel_groups VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [g["group_key"], g["hashed_id"], g["group_name"], g["kind"], g["ranks"], g["size"],
                     sorted(g["stated_by"])])


def build(con, ranks_table: str = "ranks") -> list[str]:
    """The strategy tables from the rank rows of ``ranks_table`` (default order, sizes as the files say); the
    warnings, each ``"file: message"``."""
    metas, ranks, folders, problems = read_ranks(con, ranks_table)
    if not ranks:  # a run of no ranks (msprof-analyze's or expert output alone): no strategy to speak of
        for ddl in (STRATEGY_DDL, GRID_DDL, GROUPS_DDL):
            con.execute(ddl)
        return problems
    try:
        sol = solve(metas, ranks, folders=folders)
    except ValueError as exc:  # a world beyond the grid's cap: the tables stay empty, the reason is a warning
        for ddl in (STRATEGY_DDL, GRID_DDL, GROUPS_DDL):
            con.execute(ddl)
        return [*problems, f"profiler_metadata.json: parallel strategy not built: {exc}"]
    write(con, sol)
    return [*problems, *(w if w.split(": ", 1)[0].endswith("profiler_metadata.json")
                         else f"profiler_metadata.json: {w}" for w in sol.warnings)]
