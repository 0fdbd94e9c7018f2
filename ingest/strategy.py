"""The parallel strategy of a run: each rank's coordinates (dp, pp, tp, cp, ep) and the run's parallel groups, from
what the ranks' ``profiler_metadata.json`` holds (``distributed_args``, ``parallel_group_info``), else from the
rank order.

Contract: :func:`solve` ``(metas, ranks, order=None, sizes=None) -> Solution`` is pure Python (the server calls it
too, when a user picks another rank order or sizes); ``ingest.strategy_tables.build(con, ranks_table="ranks") ->
list[str]`` writes its answer for the default order as three whole-run tables and returns the warnings
(``"file: message"``):

* ``parallel_strategy``: one row — the sizes (``tp``, ``pp``, ``dp``, ``cp``, ``ep``, ``world_size``) and where they
  come from (``sizes_source``: ``distributed_args``, ``groups`` or ``none``), the rank order used for ranks whose
  coordinates no file states (``order``, ``order_source``: ``default``, ``groups`` when the stated coordinates fit
  another order and not the default, ``user``), the counts of ranks per source, the microbatches and schedule of
  ``pp_info`` when a file has it, and the warnings (JSON list);
* ``rank_grid``: one row per rank of the world (``0 … world_size − 1``; ``in_run`` says whether the run holds the
  rank's data) with its ``dp, pp, tp, cp, ep`` and ``source``: ``metadata`` (its own file states every coordinate
  of a dimension larger than 1), ``peers`` (other ranks' files state the rest: a group a rank lists shows where each
  of its members sits) or ``inferred`` (from the rank order);
* ``parallel_groups``: one row per HCCL group a file states (``group_key`` is the ``parallel_group_info`` key;
  ``hashed_id`` the id the text export's communication.json names it by, see :func:`double_hash`), with its
  ``group_name``, ``kind`` (:data:`KIND_OF_NAME`), ``ranks`` and ``stated_by`` (the ranks whose files list it).

The tables are built over every rank at once, never per shard (a rank's coordinates may come from another rank's
file): by the single-file ingest and by the sharded ingest's cluster stage from the small files' pass, before any
trace. Rules (docs/analysis.md, "Parallel strategy"):

* A group of dimension D (``tp``, ``pp``, ``dp`` — or ``dp_cp`` when cp is 1 —, ``cp``, ``exp``/``ep``) puts its
  k-th member (``global_ranks`` sorted) at coordinate k of D, and its members share every other coordinate.
* The rank order (Megatron-Core's ``tp-cp-ep-dp-pp`` unless another is picked) lays ranks out with the first
  dimension varying fastest; ep is not a dimension of its own in the dense layout: the expert layout splits dp
  into ep (as the order places it) × dp/ep, so a rank's ep is its place in the expert layout.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import dataclass, field

DIMS = ("dp", "pp", "tp", "cp", "ep")
DENSE = ("tp", "cp", "dp", "pp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
MAX_WORLD = 32768  # the grid holds a row per rank of the world (ranks ≤ MAX_SHARD_RANK)
MAX_WARNINGS = 50
# distributed_args' keys (MindSpeed / Megatron add them through prof.add_metadata_json)
SIZE_KEYS = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
             "dp": "data_parallel_size", "cp": "context_parallel_size", "ep": "expert_model_parallel_size"}
# Megatron-Core's and MindSpeed's process-group names (get_nccl_options) -> the dimension whose coordinate the
# k-th member holds; "dp_cp" is the dp group when cp is 1 (a rank's file may list only that one)
DIM_OF_NAME = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "exp": "ep", "ep": "ep"}
# the kind of communication a group carries, for the time and bandwidth per kind
KIND_OF_NAME = {
    "tp": "tp", "pp": "pp", "pp_new_stream": "pp", "embd": "pp", "pos_embd": "pp",
    "dp": "dp", "dp_cp": "dp", "dp_modulo_exp": "dp", "dp_modulo_exp_cp": "dp", "edp": "dp", "intra_dp_cp": "dp",
    "cp": "cp", "cp2": "cp", "cp_ring": "cp", "cp_ulysses": "cp", "cp_ring_intra": "cp",
    "cp_ring_intra_overlap": "cp", "hierarchical_cp": "cp",
    "exp": "ep", "ep": "ep", "tp_exp": "ep", "tp_ep": "ep",
    "mp": "mp", "mp_exp": "mp", "tp_pp": "mp", "tp_dp": "tp_dp", "tp_dp_cp": "tp_dp", "tp_cp": "tp_cp",
    "default_group": "world", "hccl_world_group": "world",
}


def double_hash(text: str) -> int:
    """The id the text export names an HCCL group by in communication.json: two 32-bit polynomial hashes of the
    ``parallel_group_info`` key (bases 29 and 131, over the characters' code points), the first in the high half.
    (msprof-analyze's ``double_hash``; checked against the real 4-rank sample, whose files name every group so.)"""
    a = b = 0
    for ch in text:
        a = (a * 29 + ord(ch)) & 0xFFFFFFFF
        b = (b * 131 + ord(ch)) & 0xFFFFFFFF
    return (a << 32) | b


def kind_of(group_name: str | None) -> str:
    return KIND_OF_NAME.get(str(group_name or "").lower(), "other")


def kind_of_members(members: list[int], grid: dict[int, dict[str, int]], sizes: dict[str, int],
                    world: int) -> str:
    """The kind of a group by where its members sit: the dimension they differ in (``tp``, ``pp``, ``dp``, ``cp``;
    ``ep`` for ep members of one expert layout that differ in dp), several joined (``tp_dp``), ``world`` for every
    rank, ``self`` for one; ``unknown`` when a member is not on the grid."""
    if any(m not in grid for m in members):
        return "unknown"
    if len(set(members)) <= 1:
        return "self"
    if world and len(set(members)) == world:
        return "world"
    differ = [d for d in ("tp", "cp", "dp", "pp") if len({grid[m][d] for m in members}) > 1]
    if differ == ["dp"] and sizes.get("ep", 1) > 1 and len(members) == sizes["ep"] \
            and len({grid[m]["ep"] for m in members}) == len(members):
        return "ep"
    return "_".join(differ)


def parse_order(text: str | None) -> list[str]:
    """``tp-cp-ep-dp-pp`` as a list: each of tp, cp, dp, pp once (ep optional: placed before dp when absent);
    ValueError naming what is wrong."""
    tokens = [t.strip().lower() for t in str(text or DEFAULT_ORDER).replace(",", "-").split("-") if t.strip()]
    bad = [t for t in tokens if t not in DIMS]
    if bad or len(set(tokens)) != len(tokens) or not set(DENSE) <= set(tokens):
        raise ValueError(f"order {text!r}: name each of tp, cp, dp, pp once (and ep, optionally), "
                         f"fastest-varying first, e.g. {DEFAULT_ORDER}")
    if "ep" not in tokens:
        tokens.insert(tokens.index("dp"), "ep")
    return tokens


def coordinates(rank: int, sizes: dict[str, int], order: list[str]) -> dict[str, int]:
    """A rank's coordinates by the rank order: the dense layout (the order without ep) gives dp, pp, tp, cp; the
    expert layout (dp split into ep × dp/ep where the order puts ep) gives ep."""
    out, rest = {}, rank
    for d in order:
        if d != "ep":
            out[d] = rest % sizes[d]
            rest //= sizes[d]
    ep = max(1, sizes["ep"])
    rest = rank
    for d in order:
        n = ep if d == "ep" else (max(1, sizes["dp"] // ep) if d == "dp" else sizes[d])
        if d == "ep":
            out["ep"] = rest % n
        rest //= n
    return out


@dataclass
class Solution:
    """What :func:`solve` found. ``grid``: rank -> (coordinates, source)."""

    sizes: dict[str, int]
    world: int
    sizes_source: str
    order: str
    order_source: str
    grid: dict[int, tuple[dict[str, int], str]]
    groups: list[dict]
    in_run: set[int]
    warnings: list[str] = field(default_factory=list)
    microbatches: int | None = None
    pp_schedule: str | None = None

    def counts(self) -> dict[str, int]:
        c = Counter(src for _, src in self.grid.values())
        return {s: c.get(s, 0) for s in ("metadata", "peers", "inferred")}


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def label(rank: int, folders: dict[int, str]) -> str:
    folder = folders.get(rank)
    return f"{folder}/profiler_metadata.json" if folder and folder != "." else f"rank {rank}'s profiler_metadata.json"


class _Warn(list):
    def add(self, text: str) -> None:
        if len(self) < MAX_WARNINGS:
            self.append(text)


def _stated_groups(metas: dict[int, dict], folders: dict[int, str], warn: _Warn) -> dict[str, dict]:
    """Every group the files state, by key: name, members (sorted) and the ranks that state it."""
    groups: dict[str, dict] = {}
    for rank, meta in sorted(metas.items()):
        info = meta.get("parallel_group_info")
        if info is None:
            continue
        if not isinstance(info, dict):
            warn.add(f"{label(rank, folders)}: parallel_group_info is not an object, ignored")
            continue
        for key, g in info.items():
            members = g.get("global_ranks") if isinstance(g, dict) else None
            if not isinstance(members, list) or not members or any(_int(m) is None or m < 0 for m in members):
                warn.add(f"{label(rank, folders)}: group {key!r} has no list of ranks, ignored")
                continue
            members = sorted(set(members))
            name = g.get("group_name") if isinstance(g.get("group_name"), str) else None
            seen = groups.get(key)
            if seen is None:
                groups[key] = {"group_key": str(key), "group_name": name, "ranks": members, "stated_by": [rank]}
            elif seen["ranks"] != members or seen["group_name"] != name:
                warn.add(f"{label(rank, folders)}: group {key!r} lists {members} ({name}), another file "
                         f"{seen['ranks']} ({seen['group_name']}): the first kept")
            else:
                seen["stated_by"].append(rank)
    return groups


def _sizes(metas: dict[int, dict], groups: dict[str, dict], ranks: list[int], folders: dict[int, str],
           warn: _Warn) -> tuple[dict[str, int], int, str]:
    """(sizes, world size, where they come from)."""
    stated = {}
    for rank, meta in metas.items():
        args = meta.get("distributed_args")
        if isinstance(args, dict):
            got = tuple(_int(args.get(SIZE_KEYS[d])) for d in ("tp", "pp", "dp", "cp", "ep"))
            stated[rank] = (*got, _int(args.get("world_size")))
    if stated:
        common, _ = Counter(stated.values()).most_common(1)[0]
        odd = sorted(r for r, v in stated.items() if v != common)
        if odd:
            warn.add(f"{label(odd[0], folders)}: distributed_args disagree with those of most ranks "
                     f"({len(odd)} rank(s): {', '.join(map(str, odd[:10]))}); the most common kept")
        sizes = {d: v for d, v in zip(("tp", "pp", "dp", "cp", "ep"), common[:5]) if v}
        world, source = common[5], "distributed_args"
    else:
        sizes, world, source = {}, None, "none"
    for dim in ("tp", "pp", "cp", "ep", "dp"):
        if dim in sizes:
            continue
        names = [n for n, d in DIM_OF_NAME.items() if d == dim]
        lens = Counter(len(g["ranks"]) for g in groups.values() if g["group_name"] in names)
        if lens:
            sizes[dim], source = lens.most_common(1)[0][0], "groups"
    if world is None:
        big = [len(g["ranks"]) for g in groups.values() if kind_of(g["group_name"]) == "world"]
        world = max(big) if big else (max(ranks) + 1 if ranks else 0)
    for dim in ("tp", "pp", "cp", "ep"):
        sizes.setdefault(dim, 1)
    if "dp" not in sizes:
        dense = sizes["tp"] * sizes["pp"] * sizes["cp"]
        sizes["dp"] = max(1, world // dense) if dense else 1
    return sizes, int(world), source


def _check_sizes(sizes: dict[str, int], world: int, warn: _Warn) -> None:
    prod = sizes["tp"] * sizes["pp"] * sizes["dp"] * sizes["cp"]
    if prod != world:
        warn.add(f"parallel sizes: tp {sizes['tp']} × pp {sizes['pp']} × dp {sizes['dp']} × cp {sizes['cp']} = "
                 f"{prod}, not the world size {world}: the rank order cannot place every rank")
    if sizes["dp"] % max(1, sizes["ep"]):
        warn.add(f"parallel sizes: ep {sizes['ep']} does not divide dp {sizes['dp']}: ep coordinates come from "
                 "the files' exp groups only")


def _stated_coordinates(groups: dict[str, dict], sizes: dict[str, int], warn: _Warn
                        ) -> tuple[dict[int, dict[str, int]], dict[int, set[str]], list[tuple[str, list[int]]]]:
    """Coordinates the groups give (before sharing): rank -> {dim: k}; which of them came from the rank's own file;
    the dimension groups used."""
    known: dict[int, dict[str, int]] = {}
    own: dict[int, set[str]] = {}
    used: list[tuple[str, list[int]]] = []
    for g in groups.values():
        name = g["group_name"]
        dim = DIM_OF_NAME.get(name) or ("dp" if name == "dp_cp" and sizes["cp"] == 1 else None)
        if dim is None:
            continue
        if len(g["ranks"]) != sizes[dim]:
            warn.add(f"group {g['group_key']!r} ({name}) has {len(g['ranks'])} ranks, the {dim} size is "
                     f"{sizes[dim]}: not used for coordinates")
            continue
        used.append((dim, g["ranks"]))
        for k, m in enumerate(g["ranks"]):
            have = known.setdefault(m, {})
            if have.get(dim, k) != k:
                warn.add(f"rank {m}: groups place it at {dim} {have[dim]} and {k}; the first kept")
                continue
            have[dim] = k
            if m in g["stated_by"]:
                own.setdefault(m, set()).add(dim)
    return known, own, used


# a dp group's members differ in ep too (the expert layout splits dp), an ep group's in dp
NOT_SHARED = {"dp": {"dp", "ep"}, "ep": {"ep", "dp"}}


def _share(known: dict[int, dict[str, int]], used: list[tuple[str, list[int]]], warn: _Warn) -> None:
    """Members of a group of dimension D share every other coordinate: spread what one member knows to the
    others, until nothing changes."""
    for _ in range(len(DIMS) * 4):
        changed = False
        for dim, members in used:
            pooled: dict[str, int] = {}
            skip = NOT_SHARED.get(dim, {dim})
            for m in members:
                for d, v in known.get(m, {}).items():
                    if d not in skip:
                        pooled.setdefault(d, v)
            for m in members:
                have = known.setdefault(m, {})
                for d, v in pooled.items():
                    if d not in have:
                        have[d], changed = v, True
        if not changed:
            return


def _fits(order: list[str], sizes: dict[str, int], known: dict[int, dict[str, int]]) -> bool:
    return all(coordinates(r, sizes, order).get(d) == v for r, c in known.items() for d, v in c.items())


def _pick_order(user: str | None, sizes: dict[str, int], known: dict[int, dict[str, int]],
                warn: _Warn) -> tuple[list[str], str]:
    if user:
        order = parse_order(user)
        if known and not _fits(order, sizes, known):
            warn.add(f"order {'-'.join(order)}: the files' groups place some ranks elsewhere; they keep the "
                     "coordinates their groups state")
        return order, "user"
    default = parse_order(DEFAULT_ORDER)
    if not known or _fits(default, sizes, known):
        return default, "default"
    for dense in itertools.permutations(DENSE):
        order = list(dense)
        order.insert(order.index("dp"), "ep")
        if _fits(order, sizes, known):
            return order, "groups"
    warn.add(f"no rank order fits the coordinates the files' groups state; ranks they do not place follow "
             f"{DEFAULT_ORDER}")
    return default, "default"


def _pp_info(metas: dict[int, dict]) -> tuple[int | None, str | None]:
    for meta in metas.values():
        info = meta.get("pp_info")
        if isinstance(info, str):
            try:
                info = json.loads(info)
            except ValueError:
                continue
        if isinstance(info, dict):
            mb = _int(info.get("microbatch_num"))
            kind = info.get("pp_type")
            return (mb if mb and mb > 0 else None), (kind if isinstance(kind, str) else None)
    return None, None


def solve(metas: dict[int, dict], ranks: list[int], *, order: str | None = None, sizes: dict | None = None,
          folders: dict[int, str] | None = None) -> Solution:
    """The grid of a run whose ranks ``ranks`` carry the parsed metadata ``metas`` (rank -> dict; ranks without a
    file left out). ``order`` / ``sizes`` (``tp``, ``pp``, ``cp``, ``ep``, and ``dp``: the rest of the world):
    what a user picked. ValueError for an order or sizes that cannot hold."""
    folders = folders or {}
    warn = _Warn()
    groups = _stated_groups(metas, folders, warn)
    got, world, source = _sizes(metas, groups, ranks, folders, warn)
    if sizes:
        got = {d: int(sizes.get(d) or got.get(d) or 1) for d in DIMS}
        if not sizes.get("dp"):
            got["dp"] = max(1, world // (got["tp"] * got["pp"] * got["cp"]))
        if any(v < 1 for v in got.values()):
            raise ValueError("every size must be at least 1")
        source = "user"
    if world > MAX_WORLD:
        raise ValueError(f"world size {world} is above {MAX_WORLD}")
    _check_sizes(got, world, warn)
    known, own, used = _stated_coordinates(groups, got, warn)
    _share(known, used, warn)
    picked, order_source = _pick_order(order, got, known, warn)
    if picked.index("ep") + 1 == picked.index("dp"):  # ep right before dp: a rank's ep is its dp modulo ep
        for r, have in known.items():
            if "dp" in have and "ep" not in have:
                have["ep"] = have["dp"] % max(1, got["ep"])
                if "dp" in own.get(r, set()):
                    own[r].add("ep")
    grid: dict[int, tuple[dict[str, int], str]] = {}
    big = [d for d in DIMS if got[d] > 1]
    for r in range(max(world, (max(ranks) + 1) if ranks else 0)):
        have = dict(known.get(r, {}))
        mine = own.get(r, set())
        formula = coordinates(r, got, picked)
        if all(d in have for d in big):
            src = "metadata" if all(d in mine for d in big) else "peers"
        else:
            src = "inferred"
        grid[r] = ({d: have.get(d, formula[d] if got[d] > 1 else 0) for d in DIMS}, src)
    coords = {r: c for r, (c, _) in grid.items()}
    rows = []
    for g in groups.values():
        kind = kind_of(g["group_name"])
        if kind not in ("tp", "pp", "dp", "cp", "world") and (kind != "ep" or got["ep"] == 1):
            # a composite or unknown name, or an expert group without experts in parallel: where its members
            # sit says more (tp_exp is the tp group when ep is 1, mp the pp group when tp is 1)
            by_members = kind_of_members(g["ranks"], coords, got, world)
            if kind == "other" or by_members in ("tp", "pp", "dp", "cp", "ep"):
                kind = by_members
        rows.append({**g, "hashed_id": str(double_hash(g["group_key"])), "kind": kind, "size": len(g["ranks"])})
    mb, schedule = _pp_info(metas)
    return Solution(sizes=got, world=world, sizes_source=source, order="-".join(picked), order_source=order_source,
                    grid=grid, groups=rows, in_run=set(ranks), warnings=list(warn), microbatches=mb,
                    pp_schedule=schedule)
