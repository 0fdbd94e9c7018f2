"""The affinity-API check of the advice (``advice.py`` runs it): consecutive top-level torch ops on one thread that
spell an operation torch_npu has one fused API for (:data:`AFFINITY_RULES`, the rules as data)."""

from __future__ import annotations

from ascendscope.server.queries.advice_core import Advisor, fmt_ms

MAX_AFFINITY_CANDIDATES = 200_000

# Each rule: id, the op names in order (a tuple at a position lists alternatives), the replacement, and what the
# sequence computes. Longer rules are tried first, so a sequence is reported once, under its longest rule.
AFFINITY_RULES = (
    ("rotary_mul", ("aten::mul", "aten::slice", "aten::slice", "aten::neg", "aten::cat", "aten::mul", "aten::add"),
     "torch_npu.npu_rotary_mul", "rotary position embedding, x·cos + rotate_half(x)·sin"),
    ("rms_norm", ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"),
     "torch_npu.npu_rms_norm", "RMSNorm, x·rsqrt(mean(x²) + eps)"),
    ("fusion_attention", (("aten::matmul", "aten::bmm"), ("aten::div", "aten::mul"), ("aten::add", "aten::masked_fill"),
                          ("aten::softmax", "aten::_softmax"), ("aten::matmul", "aten::bmm")),
     "torch_npu.npu_fusion_attention", "attention, softmax(Q·Kᵀ·scale + mask)·V"),
    ("masked_softmax", (("aten::add", "aten::masked_fill"), ("aten::softmax", "aten::_softmax")),
     "torch_npu.npu_scaled_masked_softmax", "softmax over masked scores"),
    ("swiglu", ("aten::silu", "aten::mul"), "torch_npu.npu_swiglu", "SwiGLU, silu(a)·b"),
    ("matmul_add", (("aten::matmul", "aten::mm"), "aten::add"), "torch.addmm (one MatMul with its bias)",
     "a matmul, then a bias add"),
    ("confusion_transpose", (("aten::permute", "aten::transpose"), ("aten::reshape", "aten::view")),
     "torch_npu.npu_confusion_transpose", "a transpose, then a reshape"),
)

# Top-level torch ops of each Python thread (no enclosing aten:: op), each with the names that follow it.
AFFINITY_SQL = """
WITH ops AS (
  SELECT s.slice_id, s.track_id, s.ts_ns, s.dur_ns, s.name,
         max(s.ts_ns + s.dur_ns) OVER (PARTITION BY s.track_id ORDER BY s.ts_ns, s.dur_ns DESC, s.slice_id
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS cover_end
  FROM slices s JOIN tracks t ON t.track_id = s.track_id
  WHERE s.rank = ? AND t.kind = 'python' AND starts_with(s.name, 'aten::')
),
top AS (
  SELECT slice_id, track_id, ts_ns, dur_ns, name,
         list(name) OVER nxt AS names, list(slice_id) OVER nxt AS ids, list(ts_ns + dur_ns) OVER nxt AS ends
  FROM ops WHERE cover_end IS NULL OR cover_end <= ts_ns
  WINDOW nxt AS (PARTITION BY track_id ORDER BY ts_ns, slice_id ROWS BETWEEN CURRENT ROW AND ? FOLLOWING)
)
SELECT slice_id, track_id, ts_ns, names, ids, ends FROM top WHERE list_contains(?::VARCHAR[], name)
ORDER BY track_id, ts_ns, slice_id LIMIT ?
"""


def affinity(a: Advisor) -> None:
    rules = [(rid, tuple(alternatives(p) for p in seq), repl, what) for rid, seq, repl, what in AFFINITY_RULES]
    rules.sort(key=lambda r: -len(r[1]))
    longest = max(len(r[1]) for r in rules)
    firsts = sorted({name for r in rules for name in r[1][0]})
    rows = a.db.rows(AFFINITY_SQL, [a.rank, longest - 1, firsts, MAX_AFFINITY_CANDIDATES + 1])
    truncated = len(rows) > MAX_AFFINITY_CANDIDATES
    used: set[int] = set()
    hits: dict[str, list] = {}
    for first_id, _track, ts, names, ids, ends in rows[:MAX_AFFINITY_CANDIDATES]:
        if first_id in used:
            continue
        for rid, seq, _, _ in rules:
            if len(names) >= len(seq) and all(names[i] in seq[i] for i in range(len(seq))) \
                    and not used.intersection(ids[:len(seq)]):
                used.update(ids[:len(seq)])
                hits.setdefault(rid, []).append((int(ts), int(ends[len(seq) - 1]), list(ids[:len(seq)]),
                                                 list(names[:len(seq)])))
                break
    for rid, seq, repl, what in rules:
        found = hits.get(rid)
        if not found:
            continue
        host_ns = sum(e - s for s, e, _, _ in found)
        pattern = " → ".join("|".join(sorted(p)) for p in seq)
        inst = [a.instance(a.rank, ids[0], names[0], s, None, end_ns=str(e), span_ns=e - s,
                           slice_ids=[int(i) for i in ids], ops=names, detail=" → ".join(names))
                for s, e, ids, names in found]
        a.add("affinity_api", rid, "info",
              f"Rank {a.rank}: {len(found):,}× {what} → {repl}",
              f"Rank {a.rank}: {len(found):,} times the torch ops {pattern} run one after another "
              f"(top-level ops of one thread), {fmt_ms(host_ns)} of host time from the first op's start to the "
              f"last op's end. Together they compute {what}; {repl} does it in one fused call: fewer "
              "launches and fewer round trips through device memory." + (
                     " (Only the first candidates were searched.)" if truncated else ""),
              rank=a.rank, source={"table": "slices", "lane": "Python", "rule": rid},
              instances=inst, metrics={"count": len(found), "host_span_ns": host_ns, "rule": rid,
                                       "pattern": [sorted(p) for p in seq], "replacement": repl,
                                       "candidates_truncated": truncated})


def alternatives(p) -> tuple[str, ...]:
    return (p,) if isinstance(p, str) else tuple(p)
