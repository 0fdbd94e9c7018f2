"""``cluster_phases``: every mstx range of every rank as a phase, with its role, iteration and parsed message.

Contract: :func:`build` ``(con)`` (re)creates ``cluster_phases`` from the run tables of ``con`` (one rank or
several; every row comes from one rank's own rows, so the tables of several shards concatenated equal the table
built over the whole run). One row per mstx range (markers, of no length, are not phases):

* ``source = 'host'``: a slice of an mstx lane: category ``mstx`` / ``MsTx`` / ``msprof_tx`` (any case) off the
  Python lanes, or a track of a process named ``MsprofTx`` or ``MsTx_<id>`` (the text export's lane, the db
  export's ``MSTX_EVENTS``). torch_npu's torch ops of the mstx calls (``mstx_mark_op``, …) are not phases;
* ``source = 'device'``: the slice an ``MsTx`` flow ends on (a range started with a stream: its device range, in
  Ascend Hardware). Its message is the host range's.

``message`` is kept verbatim; ``fields`` is the message parsed when it is a JSON object or a Python ``str()`` of a
dict (``{'name': 'forward_step', 'current_microbatch': 3}``, as msprof-analyze's ``pp_chart`` asks), else NULL.
``phase`` is the ``name`` field when there is one, else the message. ``microbatch`` the ``current_microbatch``
field. ``iteration``: a message field ``iteration`` / ``step``, else the rank folder's ``session`` (the k-th of its
RL group's folders of one rank id: verl's discrete mode writes one per profiled call), else the rank's ``steps`` row
(ProfilerStep#N) whose range holds the range's start, else a number in the rank folder's path (``step_3``,
``iteration-3``, or a folder named by a number, as verl's end-to-end profile wrote ``<save_path>/<step>/e2e/`` up
to January 2026).
``role``: a folder of the rank's path named after a role (``ingest.roles.ROLE_FOLDERS``, ``role_source =
'folder'``), else the phase's name (:data:`ROLE_OF_PHASE`, ``role_source = 'name'``), else NULL. ``label``: the
worker as its folders name it, ``<group folder>·<own rank id>`` (``actor_update·0``) for a rank of an RL job's role
folders that reuse rank ids (``ranks.group_folder``), else NULL.
"""

from __future__ import annotations

import ast
import json
import re

from .columns import insert_columns
from .roles import folder_role

DDL = """CREATE OR REPLACE TABLE cluster_phases (rank INTEGER, role VARCHAR, role_source VARCHAR,
    iteration BIGINT, phase VARCHAR, message VARCHAR, fields JSON, microbatch BIGINT, source VARCHAR,
    slice_id BIGINT, track_id INTEGER, start_ns BIGINT, end_ns BIGINT, label VARCHAR)"""

# torch_npu's own torch op per mstx call (mstx_mark_op, mstx_range_push_op, …: category mstx on the Python lane of
# a db export) carries no message: only the mstx lanes' ranges are phases
IS_HOST_MSTX = """((lower(coalesce(s.cat, '')) IN ('mstx', 'msprof_tx', 'msproftx') AND t.kind <> 'python')
    OR t.process_name = 'MsprofTx' OR starts_with(t.process_name, 'MsTx'))"""
# host ranges, then the device ranges their MsTx flows end on; each with the step (ProfilerStep#N) holding it
RANGES_SQL = f"""
WITH host AS (
    SELECT s.rank, s.slice_id, s.track_id, s.name AS message, s.ts_ns, s.dur_ns, 'host' AS source
    FROM slices s JOIN tracks t USING (track_id)
    WHERE s.dur_ns > 0 AND {IS_HOST_MSTX}),
dev AS (
    SELECT d.rank, d.slice_id, d.track_id, coalesce(h.message, d.name) AS message, d.ts_ns, d.dur_ns,
           'device' AS source
    FROM flows f JOIN slices d ON d.slice_id = f.dst_slice_id
    LEFT JOIN host h ON h.slice_id = f.src_slice_id
    WHERE lower(f.cat) = 'mstx' AND d.dur_ns > 0 AND d.slice_id NOT IN (SELECT slice_id FROM host)),
ranges AS (SELECT * FROM host UNION ALL SELECT * FROM dev)
SELECT r.rank, r.slice_id, r.track_id, r.message, r.ts_ns, r.ts_ns + r.dur_ns, r.source, k.folder,
       k.group_folder, k.own_rank, k.session,
       (SELECT max(st.step) FROM steps st WHERE st.rank = r.rank AND r.ts_ns BETWEEN
            coalesce(CASE WHEN r.source = 'device' THEN st.device_start_ns END, st.host_start_ns)
            AND coalesce(CASE WHEN r.source = 'device' THEN st.device_end_ns END, st.host_end_ns)) AS step
FROM ranges r LEFT JOIN ranks k USING (rank)
ORDER BY r.rank, r.ts_ns, r.slice_id
"""

# phase names of verl's workers and trainer, and MindSpeed-RL's profiler stages, to the role that runs them
ROLE_OF_PHASE = {
    "generate_sequences": "rollout", "gen": "rollout", "actor_generate": "rollout", "generate": "rollout",
    "compute_log_prob": "actor", "old_log_prob": "actor", "actor_compute_log_prob": "actor",
    "update_actor": "actor", "actor_update": "actor", "update_policy": "actor",
    "compute_ref_log_prob": "ref", "ref": "ref", "reference_compute_log_prob": "ref",
    "compute_values": "critic", "values": "critic", "update_critic": "critic",
    "compute_rm_score": "reward", "reward": "reward", "compute_reward": "reward",
    "compute_advantage": "controller", "adv": "controller",
    "sync_weights": "rollout", "update_weights": "rollout", "weight_sync": "rollout", "resharding": "rollout",
}
_STEP_FOLDER = re.compile(r"^(?:(?:step|iter|iteration)[_-]?)?(\d+)$", re.IGNORECASE)
MAX_MESSAGE_PARSE = 4096  # mstx messages are short (156 bytes in profiler scenarios); longer text stays unparsed


def parse_message(message: str | None) -> dict | None:
    """The message as a dict when it is a JSON object or the ``str()`` of a Python dict, else None."""
    text = (message or "").strip()
    if not (text.startswith("{") and text.endswith("}")) or len(text) > MAX_MESSAGE_PARSE:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)  # literals only: never evaluates code
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    if not isinstance(value, dict):
        return None
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        value = {str(k): str(v) for k, v in value.items()}
    return {str(k): v for k, v in value.items()}


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def folder_iteration(folder: str | None) -> int | None:
    for part in reversed((folder or "").replace("\\", "/").split("/")[:-1]):
        m = _STEP_FOLDER.match(part)
        if m:
            return int(m.group(1))
    return None


def build(con) -> None:
    """(Re)create ``cluster_phases`` from ``con``'s slices, flows, steps and ranks."""
    con.execute(DDL)
    rows = con.execute(RANGES_SQL).fetchall()
    if not rows:
        return
    cols: list[list] = [[] for _ in range(14)]
    for rank, slice_id, track_id, message, start, end, source, folder, group, own_rank, session, step in rows:
        fields = parse_message(message)
        name = fields.get("name") if fields else None
        phase = name if isinstance(name, str) and name else message
        iteration = None
        if fields:
            iteration = _int(fields.get("iteration", fields.get("step")))
        if iteration is None:
            iteration = session
        if iteration is None:
            iteration = step if step is not None else folder_iteration(folder)
        role, role_source = folder_role(folder), "folder"
        if role is None:
            role = ROLE_OF_PHASE.get((phase or "").strip().lower())
            role_source = "name" if role else None
        values = (rank, role, role_source, iteration, phase, message,
                  json.dumps(fields) if fields is not None else None,
                  _int(fields.get("current_microbatch")) if fields else None, source, slice_id, track_id, start, end,
                  f"{group}·{own_rank}" if group is not None else None)
        for col, v in zip(cols, values):
            col.append(v)
    insert_columns(con, "cluster_phases", cols)
