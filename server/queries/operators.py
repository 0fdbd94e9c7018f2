"""Operator view: device kernels (``kernels``) grouped, their instances, and host torch ops (``operators``).

Groupings (``group_by``) and the columns that key them:
  type        Type + Accelerator Core      ("Computing Operator Type")
  name        Name + Type + Accelerator Core ("Computing Operator")
  name_shapes Name + Input Shapes + Type + Accelerator Core
  core        Accelerator Core
``kind`` narrows to computing kernels, communication kernels (HCCL / ``hcom_*``) or all. A group is addressed by
its key values as a JSON list (``group_key`` in every group row), so NULL keys survive the round trip.
Shares are of the summed device time of the rank's kernels under the same filter.
"""

from __future__ import annotations

import json

from ascendscope.server.queries import (
    MAX_CSV_ROWS,
    Page,
    QueryError,
    Where,
    col_or_null,
    csv_text,
    links,
    ns_str,
    order_by,
    paged,
    ratio,
    sources,
    table_columns,
)

GROUP_KEYS: dict[str, tuple[str, ...]] = {
    "type": ("type", "accelerator_core"),
    "name": ("name", "type", "accelerator_core"),
    "name_shapes": ("name", "input_shapes", "type", "accelerator_core"),
    "core": ("accelerator_core",),
}
KINDS = ("all", "computing", "communication")
TYPED_SQL = "coalesce(type, 'N/A') NOT IN ('N/A', '')"  # a kernel whose operator type is known
COMM_KERNEL_SQL = ("(coalesce(accelerator_core, '') IN ('HCCL', 'COMMUNICATION') "
                   "OR starts_with(lower(coalesce(name, '')), 'hcom'))")
KIND_SQL = {"computing": f"NOT {COMM_KERNEL_SQL}", "communication": COMM_KERNEL_SQL}

GROUP_SORTS = {"total": "total_ns", "count": "count", "avg": "avg_ns", "min": "min_ns", "max": "max_ns",
               "wait": "wait_ns"}
INSTANCE_COLUMNS = (
    ("src_row", "INTEGER"), ("step_id", "BIGINT"), ("name", "VARCHAR"), ("type", "VARCHAR"),
    ("accelerator_core", "VARCHAR"), ("start_ns", "BIGINT"), ("duration_ns", "BIGINT"), ("wait_time_ns", "BIGINT"),
    ("block_dim", "BIGINT"), ("mix_block_dim", "BIGINT"), ("stream_id", "BIGINT"), ("task_id", "BIGINT"),
    ("input_shapes", "VARCHAR"), ("input_data_types", "VARCHAR"), ("input_formats", "VARCHAR"),
    ("output_shapes", "VARCHAR"), ("output_data_types", "VARCHAR"), ("output_formats", "VARCHAR"),
)
INSTANCE_SORTS = {"start": "start_ns", "duration": "duration_ns", "wait": "wait_time_ns", "name": "name",
                  "block_dim": "block_dim", "src_row": "src_row"}

TORCH_GROUPS: dict[str, tuple[str, ...]] = {"name": ("name",), "name_shapes": ("name", "input_shapes"), "none": ()}
TORCH_TIMES = ("host_self_duration_ns", "host_total_duration_ns", "device_self_duration_ns",
               "device_total_duration_ns", "device_self_duration_with_aicore_ns",
               "device_total_duration_with_aicore_ns")
TORCH_SORTS = {"count": "count", "name": "name", "src_row": "src_row",
               "host_self": "host_self_duration_ns", "host_total": "host_total_duration_ns",
               "device_self": "device_self_duration_ns", "device_total": "device_total_duration_ns",
               "device_self_aicore": "device_self_duration_with_aicore_ns",
               "device_total_aicore": "device_total_duration_with_aicore_ns"}

KERNEL_RANKS_SQL = "SELECT rank, count(*) AS kernels, sum(duration_ns) AS total_ns FROM kernels GROUP BY rank"
TORCH_RANKS_SQL = "SELECT rank, count(*) AS operators FROM operators GROUP BY rank"
STEPS_SQL = "SELECT DISTINCT step_id FROM kernels WHERE rank = ? AND step_id IS NOT NULL ORDER BY step_id"


def ranks(db) -> list[dict]:
    """Ranks with kernel or torch-op rows, and how many."""
    out: dict[int, dict] = {}
    for rank, n, total in db.rows(KERNEL_RANKS_SQL):
        out[int(rank)] = {"rank": int(rank), "kernels": int(n), "kernel_total_ns": int(total or 0), "operators": 0}
    for rank, n in db.rows(TORCH_RANKS_SQL):
        out.setdefault(int(rank), {"rank": int(rank), "kernels": 0, "kernel_total_ns": 0})["operators"] = int(n)
    return [out[r] for r in sorted(out)]


def _kernel_where(rank: int, kind: str = "all", step: int | None = None, core: str | None = None,
                  q: str | None = None, text_col: str = "name") -> Where:
    if kind not in KINDS:
        raise QueryError("bad_kind", f"kind must be one of {', '.join(KINDS)}")
    w = Where().add("rank = ?", rank)
    if kind in KIND_SQL:
        w.add(KIND_SQL[kind])
    if step is not None:
        w.add("step_id = ?", step)
    if core:
        w.add("accelerator_core = ?", core)
    if q:
        w.add(f"strpos(lower(coalesce({text_col}, '')), lower(?)) > 0", q)
    return w


def _keys(group_by: str, columns: set[str]) -> tuple[str, ...]:
    keys = GROUP_KEYS.get(group_by)
    if keys is None:
        raise QueryError("bad_group_by", f"group_by must be one of {', '.join(GROUP_KEYS)}")
    return keys


def _key_select(keys: tuple[str, ...], columns: set[str]) -> str:
    return ", ".join(col_or_null(columns, k) for k in keys)


def _total_ns(db, where: Where) -> int:
    return int(db.rows(f"SELECT coalesce(sum(duration_ns), 0) FROM kernels WHERE {where.sql()}", where.params)[0][0])


def _group_query(keys: tuple[str, ...], columns: set[str], where: Where) -> str:
    return f"""
        SELECT {_key_select(keys, columns)}, count(*) AS count, sum(duration_ns) AS total_ns,
               avg(duration_ns) AS avg_ns, min(duration_ns) AS min_ns, max(duration_ns) AS max_ns,
               sum(wait_time_ns) AS wait_ns
        FROM kernels WHERE {where.sql()} GROUP BY ALL"""


def _group_row(r: dict, keys: tuple[str, ...], total_ns: int) -> dict:
    r["total_ns"] = int(r["total_ns"] or 0)
    r["share"] = ratio(r["total_ns"], total_ns)
    r["group_key"] = json.dumps([r[k] for k in keys])
    return r


def default_group_by(db, rank: int, kind: str = "all", step: int | None = None) -> tuple[str, str | None]:
    """The grouping a view opens with: by type, unless no kernel has a type (Level0 writes "N/A", a trace-only
    rank has none): then by name, and why."""
    # the computing kernels decide: communication operators keep their op type even at Level0
    where = _kernel_where(rank, "computing" if kind == "all" else kind, step)
    if "type" in table_columns(db, "kernels"):
        typed, n = db.rows(f"SELECT count(*) FILTER (WHERE {TYPED_SQL}), count(*) FROM kernels WHERE {where.sql()}",
                           where.params)[0]
    else:
        typed, n = 0, 1
    if n and not typed:
        return "name", "No kernel has an operator type (N/A in a Level0 export, absent from a trace): grouped by name."
    return "type", None


def overview(db, rank: int, group_by: str | None = "type", kind: str = "all", step: int | None = None,
             top_n: int = 15) -> dict:
    """Totals, the accelerator-core split and the top-N groups (plus an "other" remainder) for the charts.
    ``group_by`` None: :func:`default_group_by`; the type chart then groups by name too when no kernel has a
    type (``types.by``)."""
    columns = table_columns(db, "kernels")
    group_note = None
    if group_by is None:
        group_by, group_note = default_group_by(db, rank, kind, step)
    keys = _keys(group_by, columns)
    where = _kernel_where(rank, kind, step)
    total = _total_ns(db, where)
    count = int(db.rows(f"SELECT count(*) FROM kernels WHERE {where.sql()}", where.params)[0][0])
    cores = db.dicts(f"""
        SELECT coalesce(accelerator_core, 'N/A') AS accelerator_core, count(*) AS count,
               sum(duration_ns) AS total_ns
        FROM kernels WHERE {where.sql()} GROUP BY ALL ORDER BY total_ns DESC NULLS LAST""", where.params)
    for c in cores:
        c["total_ns"] = int(c["total_ns"] or 0)
        c["share"] = ratio(c["total_ns"], total)
    top_n = max(1, min(int(top_n), 100))
    top = db.dicts(_group_query(keys, columns, where) + " ORDER BY total_ns DESC NULLS LAST LIMIT ?",
                   where.params + [top_n])
    top = [_group_row(r, keys, total) for r in top]
    computing = _kernel_where(rank, "computing" if kind == "all" else kind, step)
    typed = "type" in columns and db.rows(f"SELECT count(*) FROM kernels WHERE {computing.sql()} AND {TYPED_SQL}",
                                          computing.params)[0][0] > 0
    type_col = "type" if typed else "name"  # no kernel has a type: the type chart shows names
    types = db.dicts(f"""
        SELECT coalesce({type_col}, 'N/A') AS type, count(*) AS count, sum(duration_ns) AS total_ns
        FROM kernels WHERE {where.sql()} GROUP BY ALL ORDER BY total_ns DESC NULLS LAST LIMIT ?""",
                     where.params + [top_n])
    for t in types:
        t["total_ns"] = int(t["total_ns"] or 0)
        t["share"] = ratio(t["total_ns"], total)
    shown = sum(t["total_ns"] for t in types)
    steps = [int(r[0]) for r in db.rows(STEPS_SQL, [rank])] if "step_id" in columns else []
    return {
        "rank": rank, "group_by": group_by, "kind": kind, "step": step, "top_n": top_n,
        "kernel_count": count, "total_ns": total, "steps": steps,
        "cores": cores, "group_by_note": group_note,
        "types": {"rows": types, "other_ns": max(0, total - shown), "by": type_col},
        "from_trace": rank in sources.from_trace(db, "kernels"),
        "top": {"keys": list(keys), "rows": top, "other_ns": max(0, total - sum(r["total_ns"] for r in top))},
    }


def groups(db, rank: int, group_by: str = "type", kind: str = "all", step: int | None = None,
           core: str | None = None, q: str | None = None, sort: str | None = None, order: str | None = None,
           page: Page | None = None, csv: bool = False):
    """One page of kernel groups (count, total, avg, min, max, wait, share), sorted on the server."""
    page = page or Page()
    columns = table_columns(db, "kernels")
    keys = _keys(group_by, columns)
    where = _kernel_where(rank, kind, step, core, q, text_col=keys[0] if keys[0] in columns else "name")
    total = _total_ns(db, _kernel_where(rank, kind, step, core))
    sorts = {**GROUP_SORTS, **{k: k for k in keys}}
    base = _group_query(keys, columns, where)
    sql = f"{base} ORDER BY {order_by(sort, order, sorts, 'total')}, {', '.join(keys)} LIMIT ? OFFSET ?"
    if csv:
        rows = db.dicts(sql, where.params + [MAX_CSV_ROWS + 1, 0])
        cols = list(keys) + ["count", "total_ns", "avg_ns", "min_ns", "max_ns", "wait_ns", "share"]
        return csv_text(cols, ([r.get(c) for c in cols[:-1]] + [ratio(r["total_ns"], total)] for r in rows))
    n = int(db.rows(f"SELECT count(*) FROM ({base})", where.params)[0][0])
    rows = [_group_row(r, keys, total) for r in db.dicts(sql, where.params + [page.limit, page.offset])]
    return paged(rows, page, n) | {"keys": list(keys), "group_by": group_by, "total_ns": total}


def parse_group_key(group_by: str, group_key: str | None) -> list:
    keys = GROUP_KEYS.get(group_by)
    if keys is None:
        raise QueryError("bad_group_by", f"group_by must be one of {', '.join(GROUP_KEYS)}")
    if group_key is None:
        return []
    try:
        values = json.loads(group_key)
    except ValueError:
        raise QueryError("bad_group_key", "group_key must be the JSON list given in a group row") from None
    if not isinstance(values, list) or len(values) != len(keys) or \
            not all(v is None or isinstance(v, str) for v in values):
        raise QueryError("bad_group_key", f"group_key must be a JSON list of {len(keys)} strings or nulls")
    return values


def instances(db, run_id: str, rank: int, group_by: str = "type", group_key: str | None = None,
              kind: str = "all", step: int | None = None, sort: str | None = None, order: str | None = None,
              page: Page | None = None, csv: bool = False):
    """The kernels of one group (or all of the rank's when ``group_key`` is absent), each with its slice link."""
    page = page or Page()
    columns = table_columns(db, "kernels")
    keys = _keys(group_by, columns)
    values = parse_group_key(group_by, group_key)
    where = _kernel_where(rank, kind, step)
    for k, v in zip(keys, values):
        if k in columns:
            where.add(f"{k} IS NOT DISTINCT FROM ?", v)
        elif v is not None:
            where.add("FALSE")
    select = ", ".join(col_or_null(columns, c, t) for c, t in INSTANCE_COLUMNS)
    sql = (f"SELECT {select} FROM kernels WHERE {where.sql()} "
           f"ORDER BY {order_by(sort, order, INSTANCE_SORTS, 'start')}, src_row LIMIT ? OFFSET ?")
    if csv:
        rows = db.rows(sql, where.params + [MAX_CSV_ROWS + 1, 0])
        return csv_text([c for c, _ in INSTANCE_COLUMNS], rows)
    n = int(db.rows(f"SELECT count(*) FROM kernels WHERE {where.sql()}", where.params)[0][0])
    rows = db.dicts(sql, where.params + [page.limit, page.offset])
    traced = rank in links.trace_ranks(db)
    matches = links.match_slices(db, rank, [(r["start_ns"], r["name"]) for r in rows],
                                 links.KERNEL_TOLERANCE_NS) if traced else {}
    for r in rows:
        start = r["start_ns"]
        sid = matches.get((int(start), r["name"])) if start is not None else None
        r["slice_id"] = sid
        r["timeline_url"] = links.slice_url(run_id, sid) if sid is not None else (
            links.window_url(run_id, start, None if start is None else start + (r["duration_ns"] or 0))
            if traced else None)
        r["start_ns"] = ns_str(start)
    return paged(rows, page, n) | {"has_trace": traced, "keys": list(keys), "group": values}


def torch_ops(db, rank: int, group_by: str = "name", q: str | None = None, sort: str | None = None,
              order: str | None = None, page: Page | None = None, csv: bool = False):
    """Host torch ops from ``operator_details.csv``: per name (or name + shapes) sums, or the raw rows."""
    page = page or Page()
    keys = TORCH_GROUPS.get(group_by)
    if keys is None:
        raise QueryError("bad_group_by", f"group_by must be one of {', '.join(TORCH_GROUPS)}")
    columns = table_columns(db, "operators")
    where = Where().add("rank = ?", rank)
    if q:
        where.add("strpos(lower(coalesce(name, '')), lower(?)) > 0", q)
    times = [col_or_null(columns, t, "BIGINT") for t in TORCH_TIMES]
    if keys:
        sums = ", ".join(f"sum({t}) AS {t}" for t in TORCH_TIMES)
        base = (f"SELECT {', '.join(keys)}, count(*) AS count, {sums} "
                f"FROM (SELECT {_key_select(keys, columns)}, {', '.join(times)} FROM operators WHERE {where.sql()}) "
                f"GROUP BY ALL")
        sorts = {k: v for k, v in TORCH_SORTS.items() if k != "src_row"}
        if "input_shapes" in keys:
            sorts["input_shapes"] = "input_shapes"
        cols = list(keys) + ["count"] + list(TORCH_TIMES)
        tiebreak = ", ".join(keys)
    else:
        base = (f"SELECT src_row, name, {col_or_null(columns, 'input_shapes')}, 1 AS count, {', '.join(times)} "
                f"FROM operators WHERE {where.sql()}")
        sorts = {k: v for k, v in TORCH_SORTS.items() if k != "count"}
        cols = ["src_row", "name", "input_shapes"] + list(TORCH_TIMES)
        tiebreak = "src_row"
    sql = f"{base} ORDER BY {order_by(sort, order, sorts, 'device_self')}, {tiebreak} LIMIT ? OFFSET ?"
    if csv:
        rows = db.dicts(sql, where.params + [MAX_CSV_ROWS + 1, 0])
        return csv_text(cols, ([r.get(c) for c in cols] for r in rows))
    n = int(db.rows(f"SELECT count(*) FROM ({base})", where.params)[0][0])
    rows = db.dicts(sql, where.params + [page.limit, page.offset])
    for r in rows:
        for t in TORCH_TIMES:
            r[t] = None if r[t] is None else int(r[t])
    return paged(rows, page, n) | {"group_by": group_by, "keys": list(keys)}
