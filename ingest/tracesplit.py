"""Cut one JSON array of trace events into byte ranges at event boundaries, so that several readers parse it on
several cores (DuckDB's ``read_json`` parses one file on one thread).

Each range is copied out as an array of its own (``[`` + the range + ``]``, in the kernel where it can). A cut is
the ``}`` of one event and the ``{`` of the next, at a ``}, {`` near ``size × k / parts``. It is chosen so that
the object after it decodes (Python's JSON decoder, from that ``{``) as an event with a ``"ph"`` key followed by
``,`` or ``]``: a ``}, {`` inside a string is then passed over (the quotes of a key inside a string are escaped),
and so is one inside an args object's value that is not an event.

That choice is a heuristic; what makes the read correct is this: if a cut is not between two top-level events
(inside a string, or inside an event's nested value), the range that ends at it ends inside an event, so its array
is not valid JSON and its read fails. By induction from the first range (which starts at the array's real ``[``),
ranges that all read are ranges cut between top-level events, holding the events of the file in its order; the
caller reads the whole file instead when any range fails (``TraceRead._read_parts``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

CHUNK = 8 << 20
SPLIT_MIN_BYTES = 32 << 20  # below this one reader is quick enough
MAX_PARTS = 8
PROBE_BYTES = 1 << 20  # how far past the wanted offset a cut is looked for
EVENT_PROBE_BYTES = 64 << 10  # an event longer than this is not decoded to test a cut: the next ``}, {`` is tried
_SEPARATOR = re.compile(rb"\}\s*,\s*\{")
_AFTER_EVENT = re.compile(r"\s*[,\]]")
_DECODER = json.JSONDecoder()


def cut_points(path: Path, parts: int) -> list[tuple[int, int]]:
    """(end of one range, start of the next) for up to ``parts - 1`` cuts, in order; fewer when no cut was
    found near a wanted offset. The end is just after a ``}``, the start at the next ``{``."""
    size = path.stat().st_size
    cuts: list[tuple[int, int]] = []
    with open(path, "rb") as fh:
        for k in range(1, parts):
            want = max(size * k // parts, cuts[-1][1] if cuts else 0)
            fh.seek(want)
            window = fh.read(PROBE_BYTES + EVENT_PROBE_BYTES)
            cut = _first_event_cut(window)
            if cut is not None:
                cuts.append((want + cut[0], want + cut[1]))
    return cuts


def _first_event_cut(window: bytes) -> tuple[int, int] | None:
    for m in _SEPARATOR.finditer(window, 0, PROBE_BYTES):
        start = m.end() - 1
        head = window[start:start + EVENT_PROBE_BYTES].decode("utf-8", "replace")
        try:
            event, end = _DECODER.raw_decode(head)
        except ValueError:
            continue
        if isinstance(event, dict) and "ph" in event and _AFTER_EVENT.match(head, end):
            return m.start() + 1, start
    return None


def split_ranges(path: Path, workdir: Path, parts: int) -> list[Path] | None:
    """``parts`` JSON arrays (fewer when cuts are not found) holding the events of the array at ``path`` in its
    order; None when not worth it (a small file, one part) or when the copies would not fit on the work disk."""
    size = path.stat().st_size
    parts = min(int(parts), MAX_PARTS)
    if size < SPLIT_MIN_BYTES or parts < 2:
        return None
    workdir.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(workdir).free < 2 * size:  # the copies, and room for the run's own files after them
        return None
    cuts = cut_points(path, parts)
    if not cuts:
        return None
    starts = [0] + [resume for _, resume in cuts]
    ends = [end for end, _ in cuts] + [size]
    out = []
    for i, (start, end) in enumerate(zip(starts, ends)):
        dst = workdir / f"{path.name}.part{i + 1}"
        _copy_bytes(path, dst, start, end, prefix=b"[" if i else b"", suffix=b"]" if i < len(cuts) else b"")
        out.append(dst)
    return out


def _copy_bytes(src: Path, dst: Path, start: int, stop: int, prefix: bytes = b"", suffix: bytes = b"") -> None:
    """``prefix`` + bytes [start, stop) of ``src`` + ``suffix`` into ``dst`` (copied in the kernel when it can)."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(prefix)
        fout.flush()
        offset = start
        try:
            while offset < stop:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), stop - offset, offset)
                if n == 0:
                    break
                offset += n
        except (AttributeError, OSError):  # not Linux, or not on this file system: copy through Python
            fin.seek(offset)
            while offset < stop:
                block = fin.read(min(CHUNK, stop - offset))
                if not block:
                    break
                fout.write(block)
                offset += len(block)
        fout.write(suffix)
