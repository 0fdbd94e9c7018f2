"""The order between a collective and the kernels around it, inferred from the launch order where no wait task
shows it (``critical_path.py`` adds the edges to the model before it is built).

torch_npu launches a collective on its communication stream after making that stream wait for the work already
queued by the launching host thread, and (a collective that is not ``async_op``) makes the compute stream wait for
the collective before the next kernel: its own exports show both as EVENT_WAIT tasks (and Notify Wait). A trace
without them (trimmed, or from another producer) still shows the launch order (HostToDevice / async_npu flows), so:

* ``before``: a collective starts after, on each other stream, the last kernel or device task launched before it
  by the same host thread ends;
* ``after``: on each other stream, the first kernel or device task launched after the collective by the same host
  thread starts after the collective ends.

An edge is inferred only where no wait task shows it (the collective's, or the kernel's, previous task on its
stream is not a wait task) and only where the measured times obey it (the device never started the later one
before the earlier one ended): a kernel that overlapped the collective (an ``async_op`` collective) gets no edge.
"""

from __future__ import annotations

from ascendscope.server.queries.critical_model import Element

WORK_KINDS = ("kernel", "device")
RULES = {"before": "a collective starts after the work launched before it on the same host thread",
         "after": "the work launched after a collective on the same host thread starts after it"}


def _stream_pred(e: Element) -> int | None:
    return next((p for p, _, _, kind in e.preds if kind == "stream"), None)


def _shown(el: list[Element], i: int) -> bool:
    """A wait task just before element ``i`` on its stream shows what it waited for."""
    p = _stream_pred(el[i])
    return p is not None and el[p].kind == "wait"


def infer(el: list[Element]) -> list[tuple[int, int, str]]:
    """Add the inferred edges to ``el`` (stream order and launch edges already set) and return them as
    ``(from, to, rule)``, in launch order."""
    launched: dict[tuple, list[tuple[int, int, int]]] = {}  # host thread -> (host start, device start, element)
    for i, e in enumerate(el):
        if e.kind not in WORK_KINDS and e.kind != "collective":
            continue
        host = next((p for p, _, _, kind in e.preds if kind == "launch"), None)
        if host is not None:
            launched.setdefault(el[host].lane, []).append((el[host].start, e.start, i))
    pairs: list[tuple[int, int, str]] = []
    for seq in launched.values():
        seq.sort()
        order = [i for _, _, i in seq]
        last: dict[tuple, int] = {}  # stream -> the last work launched so far
        for i in order:
            if el[i].kind == "collective":
                if not _shown(el, i):
                    pairs += [(j, i, "before") for lane, j in last.items()
                              if lane != el[i].lane and el[j].end <= el[i].start]
            else:
                last[el[i].lane] = i
        first: dict[tuple, int] = {}  # stream -> the first work launched after, scanning back
        for i in reversed(order):
            if el[i].kind == "collective":
                pairs += [(i, j, "after") for lane, j in first.items()
                          if lane != el[i].lane and not _shown(el, j) and el[i].end <= el[j].start]
            else:
                first[el[i].lane] = i
    for a, b, _ in pairs:
        el[b].preds.append((a, "end", 0, "inferred"))
    pairs.sort(key=lambda x: (el[x[1]].start, el[x[0]].start))
    return pairs
