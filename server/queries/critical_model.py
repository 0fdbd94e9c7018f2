"""The dependency model of one rank's step: what decided when each element started and ended, the critical path,
and the step re-evaluated with some elements sped up. Pure Python: ``critical_path.py`` loads the elements.

Elements: device tasks (``kernel``, ``device`` — other tasks —, ``wait`` — event-wait tasks —), ``collective``
ops, host calls (``host``; ``sync`` for a synchronize) and the step's host end (``end``). Each has a measured
``start`` and ``end`` (ns).

Dependencies (the model):

* *start* dependencies, edges ``pred → e`` with a ready time ``anchor(pred) + offset`` (anchor = the pred's start
  or end): ``stream`` (the previous task of the stream ends), ``launch`` (the host call that launched it — by its
  HostToDevice or async_npu flow — returns: offset to ``min(call end, e.start)``), ``thread`` (the previous call
  of the same host thread ends), ``queue`` (the enqueue that fed the dequeue the call runs in), ``inferred`` (an
  order between a collective and the kernels of other streams that no wait task shows, inferred from the launch
  order by ``critical_path.py``: the pred ends). The *binding*
  dependency is the one ready last; ``gap`` = start − its ready time (launch latency, scheduling) is kept by the
  model, on that edge only. An element without dependencies keeps its measured start.
* *end* dependencies: a ``sync`` host call and a ``wait`` device task end when their *target* ends (the latest
  device element ending inside them; for a wait task, on another stream), plus their measured tail; so does the
  step's host ``end`` (from the main thread's last call to the ProfilerStep's end) when a device element ends in
  that time: the host waited for it (an implicit synchronize, e.g. ``.item()`` without a CANN lane); a
  ``collective`` completes ``transfer`` after the later of its own start and its last peer's arrival ``peer_ns``
  (another rank's, fixed: the model changes one rank), ``transfer = end − max(start, peer_ns)``.

:func:`schedule` replays the model with durations scaled (``scale(e)``: 1 for unchanged, 1/f for an f-fold speed-up;
a collective's scale applies to its transfer) in dependency order; with nothing scaled it reproduces the measured
times exactly (tested). :func:`walk` follows the binding dependencies back from the element that ends the step:
the critical path, as consecutive segments from the step's start to its end.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

EDGE_ORDER = {"stream": 0, "launch": 1, "queue": 2, "thread": 3, "inferred": 4}  # equal ready times: the first binds


@dataclass
class Element:
    kind: str
    name: str
    start: int
    end: int
    lane: tuple
    slice_id: int | None = None
    track_id: int | None = None
    ktype: str | None = None
    depth: int = 0
    preds: list[tuple[int, str, int, str]] = field(default_factory=list)  # (pred, "start"|"end", offset, kind)
    target: int | None = None
    peer_ns: int | None = None
    peer_rank: int | None = None
    peer_window_start_ns: int | None = None
    peer_parts: dict | None = None
    prev_local: int | None = None  # a collective: the same group's previous op on this rank (in the step)


@dataclass
class Schedule:
    start: list[int]
    end: list[int]
    bind: list[int | None]  # index into the element's preds of the binding start dependency
    by_target: list[bool]  # the end waited for the target
    remote: list[bool]  # a collective waited for its last peer
    step_end: int
    final: int


class Model:
    def __init__(self, elements: list[Element], step_start: int):
        self.el = elements
        self.step_start = step_start
        for e in elements:  # a dependency is never ready after the element started (overlapping tasks)
            for k, (p, anchor, off, kind) in enumerate(e.preds):
                ready = (elements[p].start if anchor == "start" else elements[p].end) + off
                if ready > e.start:
                    e.preds[k] = (p, anchor, off - (ready - e.start), kind)
        self.order = self._order()
        self.lag = [[0] * len(e.preds) for e in elements]
        measured = self._replay(None, measured=True)
        for i, e in enumerate(elements):
            b = measured.bind[i]
            if b is not None:
                p, anchor, off, _ = e.preds[b]
                ready = (elements[p].start if anchor == "start" else elements[p].end) + off
                self.lag[i][b] = max(0, e.start - ready)
        self.measured = measured  # the replay with these lags gives the same times and choices (tested)

    def _order(self) -> list[int]:
        """Dependency order (Kahn); a cycle, which measured times cannot make, falls back to start order."""
        n = len(self.el)
        out_edges: list[list[int]] = [[] for _ in range(n)]
        indeg = [0] * n
        for i, e in enumerate(self.el):
            deps = {p for p, _, _, _ in e.preds}
            if e.target is not None:
                deps.add(e.target)
            for p in deps:
                out_edges[p].append(i)
                indeg[i] += 1
        ready = deque(sorted((i for i in range(n) if indeg[i] == 0), key=lambda i: self.el[i].start))
        order = []
        while ready:
            i = ready.popleft()
            order.append(i)
            for j in out_edges[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if len(order) < n:  # pragma: no cover - measured times order every edge
            seen = set(order)
            order += sorted((i for i in range(n) if i not in seen), key=lambda i: self.el[i].start)
        return order

    def _replay(self, scale, measured: bool = False) -> Schedule:
        el = self.el
        n = len(el)
        start, end = [0] * n, [0] * n
        bind: list[int | None] = [None] * n
        by_target, remote = [False] * n, [False] * n
        for i in self.order:
            e = el[i]
            if e.preds:
                best, best_k = None, None
                for k, (p, anchor, off, kind) in enumerate(e.preds):
                    if measured:  # the binding dependency of the measured times: the one ready last
                        ready = (el[p].start if anchor == "start" else el[p].end) + off
                    else:
                        ready = (start[p] if anchor == "start" else end[p]) + off + self.lag[i][k]
                    if best is None or ready > best or (ready == best and EDGE_ORDER[kind] <
                                                        EDGE_ORDER[e.preds[best_k][3]]):
                        best, best_k = ready, k
                start[i] = e.start if measured else best
                bind[i] = best_k
            else:
                start[i] = e.start
            s = start[i]
            if e.target is not None:
                t_end = el[e.target].end if measured else end[e.target]
                by_target[i] = t_end >= s
                end[i] = e.end if measured else max(s, t_end) + (e.end - el[e.target].end)
            elif e.kind == "collective" and e.peer_ns is not None:
                f = 1.0 if scale is None else scale(e)
                transfer = e.end - max(e.start, e.peer_ns)
                remote[i] = e.peer_ns > s
                end[i] = e.end if measured else max(s, e.peer_ns) + round(transfer * f)
            else:
                f = 1.0 if scale is None else scale(e)
                end[i] = e.end if measured else s + round((e.end - e.start) * f)
        final = self._final(end)
        return Schedule(start, end, bind, by_target, remote, end[final], final)

    def _final(self, end: list[int]) -> int:
        """The element that ends the step: the latest end (the host end on a tie)."""
        best = None
        for i, e in enumerate(self.el):
            if e.kind in ("host", "sync"):
                continue
            if best is None or end[i] > end[best] or (end[i] == end[best] and e.kind == "end"):
                best = i
        return best if best is not None else 0

    def schedule(self, scale) -> Schedule:
        return self._replay(scale)

    def walk(self, s: Schedule) -> list[dict]:
        """The critical path of schedule ``s``: segments ``{kind, index, start, end}`` from the step's start to its
        end; ``kind`` is ``work`` (an element's own time), ``tail`` (a wait or sync after its target ended),
        ``transfer`` and ``remote`` (a collective that waited for a peer: the peer's time before it arrived),
        ``gap_<edge kind>`` (the measured gap after a binding dependency) or ``before`` (the step's start to the
        path's first element)."""
        el, lo = self.el, self.step_start
        segs: list[dict] = []

        def add(kind, index, a, b):
            a = max(a, lo)
            if b > a:
                segs.append({"kind": kind, "index": index, "start": a, "end": b})

        cur, at_end, t = s.final, True, s.end[s.final]  # t: where the path enters the element
        for _ in range(4 * len(el) + 4):
            e = el[cur]
            if at_end and e.target is not None and s.by_target[cur]:
                add("tail", cur, s.end[e.target], s.end[cur])
                cur, t = e.target, s.end[e.target]
                continue
            if at_end and e.kind == "collective" and s.remote[cur]:
                add("transfer", cur, e.peer_ns, s.end[cur])
                prev = e.prev_local
                back = s.end[prev] if prev is not None else lo
                add("remote", cur, min(back, e.peer_ns), e.peer_ns)
                if prev is None or back <= lo:
                    break
                cur, t = prev, back
                continue
            add("work", cur, s.start[cur], t if not at_end else s.end[cur])
            if s.start[cur] <= lo or s.bind[cur] is None:
                break
            p, anchor, off, kind = e.preds[s.bind[cur]]
            ready = (s.start[p] if anchor == "start" else s.end[p]) + off
            add(f"gap_{kind}", cur, ready, s.start[cur])
            if ready <= lo:
                break
            cur, at_end, t = p, anchor == "end", ready
        first = min((g["start"] for g in segs), default=s.step_end)
        if first > lo:
            segs.append({"kind": "before", "index": None, "start": lo, "end": first})
        segs.reverse()
        return segs
