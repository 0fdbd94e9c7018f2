"""A constructed DualPipeV pipeline run whose phases and bubbles are known by construction.

``write_dualpipev_run(out, stages=4, microbatches=8, ..., form="text"|"db") -> dict`` writes one rank folder per
pipeline stage. DualPipeV folds the model in a V: each stage holds two chunks, chunk 0 (microbatches 0..m−1, going
down the stages) and chunk 1 (m..2m−1, coming back up), so a stage runs 2m forwards and 2m backwards. In its steady
phase a stage runs the forward of one chunk and the backward of the other as one overlapped block. Stage i of p
runs, in order (the phases msprof-analyze's ``pp_chart`` recipe lays a DualPipeV step out in, counted here for
m ≥ 2p microbatches):

* warm-up: 2(p−1−i) forwards of chunk 0;
* interleaved forwards: i+1 pairs (a chunk-0 forward, a chunk-1 forward);
* 1B1W1F: p−1−i groups of a chunk-1 backward, its weight-gradient pass (``WeightGradStore.pop``), a chunk-1 forward;
* overlap: m−2p+i+1 pairs of overlapped blocks (chunk-0 forward + chunk-1 backward, then chunk-1 forward + chunk-0
  backward);
* 1B-1-overlap: p−1−i groups of a chunk-1 backward and an overlapped block;
* interleaved backwards and cool-down: the p+1+i backwards left, the two chunks in turn.

Each op is an mstx range with the names and message the ``pp_chart`` documentation instruments DualPipeV with
(``str({'name': ..., 'current_microbatch': k})``): ``forward_step_with_model_graph`` (chunk 0) and
``forward_step_no_model_graph`` (chunk 1), ``backward_step_with_model_graph`` (chunk 0) and ``backward_step``
(chunk 1), ``forward_backward_overlaping`` (an overlapped block, ``current_microbatch`` its forward's), and
``WeightGradStore.pop``. ``profiler_metadata.json`` carries ``pp_info`` = ``{'pp_type': 'dualpipev',
'microbatch_num': m}``.

Timing is not a dependency simulation: each stage runs its ops back to back (forward ``fwd_us``, backward
``bwd_us``, weight pass ``w_us``, overlapped block ``fb_us``), starting ``fwd_us`` × i after stage 0. The step's
window runs from stage 0's first op to the last end over the stages, so each stage's bubble is the window minus
the sum of its op durations, exactly, which the truth holds (ns).
"""

from __future__ import annotations

import json
from pathlib import Path

from .phases import T0_US, _write_db, _write_text

NAMES = {("F", 0): "forward_step_with_model_graph", ("F", 1): "forward_step_no_model_graph",
         ("B", 0): "backward_step_with_model_graph", ("B", 1): "backward_step",
         ("FB", None): "forward_backward_overlaping", ("W", None): "WeightGradStore.pop"}


def stage_ops(stage: int, stages: int, microbatches: int) -> list[tuple[str, int | None, int | None]]:
    """Stage ``stage``'s ops in run order: (kind F/B/W/FB, chunk, microbatch; an FB's microbatch its forward's)."""
    p, m, i = stages, microbatches, stage
    if m < 2 * p:
        raise ValueError("DualPipeV needs at least 2 × stages microbatches")
    nxt = {("F", 0): 0, ("F", 1): m, ("B", 0): 0, ("B", 1): m}

    def take(kind, chunk):
        k = nxt[(kind, chunk)]
        nxt[(kind, chunk)] += 1
        return k

    ops: list[tuple] = [("F", 0, take("F", 0)) for _ in range(2 * (p - 1 - i))]
    for _ in range(i + 1):
        ops += [("F", 0, take("F", 0)), ("F", 1, take("F", 1))]
    for _ in range(p - 1 - i):
        ops += [("B", 1, take("B", 1)), ("W", None, None), ("F", 1, take("F", 1))]
    for _ in range(m - 2 * p + i + 1):
        f0, _b1 = take("F", 0), take("B", 1)
        f1, _b0 = take("F", 1), take("B", 0)
        ops += [("FB", None, f0), ("FB", None, f1)]
    for _ in range(p - 1 - i):
        ops.append(("B", 1, take("B", 1)))
        f1, _b0 = take("F", 1), take("B", 0)
        ops.append(("FB", None, f1))
    # the backwards left, the two chunks in turn (chunk 1's first, as its forwards finished first)
    while nxt[("B", 0)] < m or nxt[("B", 1)] < 2 * m:
        for chunk, end in ((1, 2 * m), (0, m)):
            if nxt[("B", chunk)] < end:
                ops.append(("B", chunk, take("B", chunk)))
    assert nxt[("F", 0)] == m and nxt[("F", 1)] == 2 * m, "every forward runs once"
    return ops


def write_dualpipev_run(out_dir, *, stages: int = 4, microbatches: int = 8, fwd_us: int = 100, bwd_us: int = 200,
                        w_us: int = 60, fb_us: int = 240, form: str = "text") -> dict:
    """Write the DualPipeV run (see the module note) and return its truth (times in ns)."""
    if form not in ("text", "db"):
        raise ValueError("form is 'text' or 'db'")
    took = {"F": fwd_us, "B": bwd_us, "W": w_us, "FB": fb_us}
    sched = []
    for s in range(stages):
        t, timed = fwd_us * s, []
        for kind, chunk, mb in stage_ops(s, stages, microbatches):
            timed.append((kind, chunk, mb, t, t + took[kind]))
            t += took[kind]
        sched.append(timed)
    hi = max(ops[-1][4] for ops in sched)
    meta = {"pp_info": json.dumps({"pp_type": "dualpipev", "microbatch_num": microbatches})}
    busy, bubble, counts = [], [], []
    for s, ops in enumerate(sched):
        ranges = []
        for kind, chunk, mb, a, b in ops:
            msg = {"name": NAMES[(kind, chunk if kind in ("F", "B") else None)]}
            if mb is not None:
                msg["current_microbatch"] = mb
            ranges.append((str(msg), a, b))
        folder = Path(out_dir) / f"rank{s}_ascend_pt"
        if form == "text":
            _write_text(folder, s, [(0, hi)], ranges, True, meta)
        else:
            _write_db(folder, s, [(0, hi)], ranges, meta)
        b = sum(e - a for *_, a, e in ops)
        busy.append(b * 1000)
        bubble.append((hi - b) * 1000)
        counts.append({k: sum(1 for op in ops if op[0] == kind) for k, kind in
                       (("forward", "F"), ("backward", "B"), ("overlap", "FB"), ("weight", "W"))})
    return {"stages": stages, "microbatches": microbatches, "step_ns": hi * 1000, "busy_ns": busy,
            "bubble_ns": bubble, "bubble_ratio": [b / (hi * 1000) for b in bubble], "counts": counts,
            "setter": max(range(stages), key=lambda s: (busy[s], -s)), "t0_ns": T0_US * 1000, "schedule": sched}
