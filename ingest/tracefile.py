"""Make a trace file readable by DuckDB's fast JSON-array reader, without loading it into Python objects.

DuckDB reads a bare JSON array of events at hundreds of MB/s with bounded memory. Everything else a profiler may
hand us is rewritten, in one streaming pass, into such an array in the work folder:

* ``.json.gz``                       -> decompressed;
* ``{"traceEvents": [...], ...}``    -> the array's bytes copied out (the other keys are returned as metadata);
* numeric ``"ts": 1736408883694756.090`` -> quoted, because DuckDB would parse it as a float64 and lose the ns;
* a trailing ``,]`` (torch_npu with an empty CANN part) -> fixed;
* a UTF-8 byte-order mark            -> accepted (DuckDB's reader skips it too);
* a file cut off mid-event           -> salvaged up to the last complete event (a warning gives the byte offset);
* bytes that are not UTF-8           -> replaced with U+FFFD (a warning gives the first offset).
A well-formed torch_npu ``trace_view.json`` needs none of this and is read in place.

``event_offsets`` finds where given events begin in the original file, so a warning about a skipped event can
name its byte offset. ``looks_like_trace`` sniffs whether a JSON file is a trace at all.
"""

from __future__ import annotations

import codecs
import gzip
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHUNK = 8 << 20
_NUMERIC_TS = re.compile(rb'("ts"\s*:\s*)(-?[0-9][0-9.eE+-]*)')
_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")
_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[][{}]')  # a JSON string, or a bracket outside strings
BOM = codecs.BOM_UTF8


class TraceFileError(Exception):
    """The file cannot be made readable; the message names what is wrong and where."""


@dataclass
class PreparedTrace:
    path: Path
    notes: list[str] = field(default_factory=list)
    array_start: int = 0  # offset of the event array's '[' in the original (uncompressed) data
    extra: dict = field(default_factory=dict)  # the object form's other top-level keys


def looks_like_trace(path: Path) -> bool:
    """Sniff a JSON file: a Chrome trace is an array of events or an object with traceEvents."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as fh:
            head = fh.read(1 << 20)
    except (OSError, EOFError):
        return False
    stripped = head.removeprefix(BOM).lstrip()
    if stripped.startswith(b"["):
        return b'"ph"' in head
    return stripped.startswith(b"{") and b'"traceEvents"' in head


def _first_last(path: Path) -> tuple[bytes, bytes, int]:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
        fh.seek(max(0, size - (1 << 16)))
        tail = fh.read()
    return head, tail, size


def _decompress(src: Path, dst: Path) -> None:
    try:
        with gzip.open(src, "rb") as fin, open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, CHUNK)
    except (OSError, EOFError) as exc:
        raise TraceFileError(f"cannot decompress: {exc}") from exc


def _top_level_trace_events(data: bytes) -> re.Match | None:
    """The ``"traceEvents": [`` that is a key of the outermost object, not of an object nested in it (a
    metadata object or an event's args may hold one too)."""
    first = _TRACE_EVENTS.search(data)
    if first is None:
        return None
    depth = 0
    for tok in _TOKEN.finditer(data):
        t = tok.group()
        if t[:1] == b'"':
            if depth == 1 and t == b'"traceEvents"':
                m = _TRACE_EVENTS.match(data, tok.start())
                if m:
                    return m
        elif t in (b"{", b"["):
            depth += 1
        else:
            depth -= 1
    return None


def _find_array_bounds(path: Path, size: int, head: bytes, notes: list[str]) -> tuple[int, int, dict]:
    """For the object form, the byte range of the top-level traceEvents array and the other top-level keys."""
    m = _top_level_trace_events(head)
    start_search = head
    if not m:
        with open(path, "rb") as fh:
            start_search = fh.read(64 << 20)
        m = _top_level_trace_events(start_search)
        if not m:
            raise TraceFileError('a JSON object without a top-level "traceEvents" array')
    nested = _TRACE_EVENTS.search(start_search)
    if nested.start() != m.start():
        notes.append(f'a nested "traceEvents" key at byte {nested.start()} was not taken for the event array '
                     f'(the top-level one at byte {m.start()} was read)')
    start = m.end() - 1
    prefix = start_search[: m.start()].rstrip().rstrip(b",")
    with open(path, "rb") as fh:
        fh.seek(max(0, size - (4 << 20)))
        tail_off = max(0, size - (4 << 20))
        tail = fh.read()
    # the array ends at the ']' after which the rest of the object parses as JSON
    pos = len(tail)
    for _ in range(10000):
        pos = tail.rfind(b"]", 0, pos)
        if pos < 0 or tail_off + pos <= start:
            break
        if not tail[:pos].rstrip().endswith((b"}", b"[")):  # the events array ends with an object
            continue
        rest = tail[pos + 1:].strip()
        if rest.startswith(b","):
            rest = rest[1:]
        try:
            extra = json.loads(b"{" + rest) if rest != b"}" else {}
            try:
                extra.update(json.loads(prefix + b"}"))
            except (ValueError, RecursionError):  # only names the keys that are not loaded
                notes.append("the top-level keys before traceEvents could not be read; they were not loaded")
            return start, tail_off + pos + 1, extra
        except ValueError:
            continue
    raise TraceFileError("cannot find the end of the traceEvents array (file truncated?)")


def _copy_range(src: Path, dst: Path, start: int, end: int, quote_ts: bool, fix_utf8: bool,
                closing: bytes = b"") -> int | None:
    """Copy bytes [start, end) of src to dst, optionally quoting numeric ts and replacing bad UTF-8.

    Returns the offset of the first invalid UTF-8 byte, if any was replaced."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace") if fix_utf8 else None
    first_bad = None
    carry = b""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fin.seek(start)
        remaining = end - start
        offset = start
        while remaining > 0:
            block = fin.read(min(CHUNK, remaining))
            if not block:
                break
            remaining -= len(block)
            if decoder is not None:
                if first_bad is None:
                    try:
                        block.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        if exc.reason != "unexpected end of data":
                            first_bad = offset + exc.start
                text = decoder.decode(block, final=remaining <= 0)
                offset += len(block)
                block = text.encode("utf-8")
            else:
                offset += len(block)
            if quote_ts:
                block = carry + block
                # keep the bytes after the last event boundary for the next round, so no match is split
                cut = block.rfind(b"}") + 1 if remaining > 0 else len(block)
                block, carry = block[:cut], block[cut:]
                block = _NUMERIC_TS.sub(rb'\1"\2"', block)
            fout.write(block)
        if carry:
            fout.write(_NUMERIC_TS.sub(rb'\1"\2"', carry))
        fout.write(closing)
    return first_bad


def _strip_trailing_comma(tail: bytes) -> bool:
    return re.search(rb",\s*\]\s*$", tail) is not None


def prepare(path: Path, workdir: Path, *, fix_utf8: bool = False,
            understood: frozenset[str] = frozenset({"displayTimeUnit"})) -> PreparedTrace:
    """Return a path DuckDB can read as a JSON array (the original file when it already is one).

    ``understood``: top-level keys beside traceEvents that the caller uses (the others are named as not loaded);
    ``displayTimeUnit`` is a viewer hint: ts is µs regardless."""
    workdir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    src = path
    if path.name.endswith(".gz"):
        src = workdir / (path.name[:-3] + ".decompressed")
        _decompress(path, src)
    head, tail, size = _first_last(src)
    body = head[len(BOM):] if head.startswith(BOM) else head
    if size == 0 or not body.strip():
        raise TraceFileError("empty file")
    first = body.lstrip()[:1]
    start, end, closing = 0, size, b""
    array_start = head.find(b"[")
    extra: dict = {}
    if first == b"{":
        start, end, extra = _find_array_bounds(src, size, head, notes)
        array_start = start
        skipped = sorted(k for k in extra if k not in understood)
        if skipped:
            notes.append("top-level keys beside traceEvents not loaded: " + ", ".join(skipped))
    elif first != b"[":
        raise TraceFileError(f"not a JSON trace: starts with {body.lstrip()[:20]!r}")
    else:
        stripped_tail = tail.rstrip()
        if _strip_trailing_comma(stripped_tail):
            end = size - (len(tail) - stripped_tail.rfind(b","))
            closing = b"]"
            notes.append("removed a trailing comma before the closing ]")
        elif not stripped_tail.endswith(b"]"):
            raise TraceFileError(f"truncated: the file ends at byte {size} inside the event array")
    quote_ts = _NUMERIC_TS.search(head) is not None
    if quote_ts:
        notes.append("numeric ts values read as exact decimal text")
    if src is path and start == 0 and end == size and not quote_ts and not fix_utf8 and not closing:
        return PreparedTrace(path=path, notes=notes, array_start=array_start, extra=extra)
    dst = workdir / (path.name + ".array.json")
    bad = _copy_range(src, dst, start, end, quote_ts, fix_utf8, closing)
    if src is not path:
        src.unlink(missing_ok=True)
    if bad is not None:
        notes.append(f"bytes that are not UTF-8 (first at byte {bad}) replaced with U+FFFD")
    return PreparedTrace(path=dst, notes=notes, array_start=array_start, extra=extra)


def event_offsets(path: Path, indices: list[int], array_start: int = 0) -> dict[int, int]:
    """Where the events of the given 0-based indices begin in ``path`` (a ``.gz`` file: in its uncompressed
    data), for the array whose '[' is at ``array_start``. Events are located by the ``}, {`` separators
    between them, as in ``skip_record``; an index past the last event is left out."""
    wanted = {i for i in indices if i >= 0}
    found: dict[int, int] = {}
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        fh.seek(array_start + 1)
        base, carry, last, index = array_start + 1, b"", -1, 0
        while wanted - found.keys():
            block = fh.read(CHUNK)
            if not block:
                break
            data = carry + block
            if base == array_start + 1 and 0 in wanted:
                lead = len(data) - len(data.lstrip())
                if data[lead:lead + 1] == b"{":
                    found[0] = base + lead
            for m in _EVENT_GAP.finditer(data):
                pos = base - len(carry) + m.end() - 1
                if pos <= last:  # already seen at the end of the previous block
                    continue
                last, index = pos, index + 1
                if index in wanted:
                    found[index] = pos
            carry = data[-64:]
            base += len(block)
    return found


def salvage(path: Path, workdir: Path, before: int | None = None) -> tuple[Path, int]:
    """Copy the events of a damaged array up to the last complete event before byte ``before``.

    Returns the new path and the byte offset where the copy stops."""
    size = path.stat().st_size
    limit = size if before is None else min(before, size)
    window = 16 << 20
    with open(path, "rb") as fh:
        lo = max(0, limit - window)
        fh.seek(lo)
        block = fh.read(limit - lo)
    cut = None
    for m in _EVENT_GAP.finditer(block):
        cut = lo + m.start() + 1
    if cut is None:
        raise TraceFileError("no complete event could be recovered")
    dst = workdir / (path.name + ".salvaged.json")
    _copy_range(path, dst, 0, cut, False, False, b"]")
    return dst, cut


def skip_record(path: Path, workdir: Path, record: int) -> tuple[Path, int]:
    """Copy an array without its ``record``-th element (1-based).

    Elements are located by the ``}, {`` separators between top-level events, which torch_npu's flat events
    never contain inside an event. Returns the new path and the byte offset where the removed element began."""
    if record < 1:
        raise TraceFileError("cannot locate the damaged event")
    seps: list[int] = []
    with open(path, "rb") as fh:
        base, carry = 0, b""
        while len(seps) < record:
            block = fh.read(CHUNK)
            if not block:
                break
            data = carry + block
            for m in _EVENT_GAP.finditer(data):
                pos = base - len(carry) + m.start()
                if not seps or pos > seps[-1]:
                    seps.append(pos)
            carry = data[-64:]
            base += len(block)
    if record == 1:
        if not seps:
            raise TraceFileError("no complete event could be recovered")
        with open(path, "rb") as fh:
            start = fh.read(1 << 16).index(b"[") + 1
        cut_from, cut_to, prefix = start, seps[0] + 1, True
    else:
        if len(seps) < record - 1:
            raise TraceFileError("cannot locate the damaged event")
        cut_from = seps[record - 2] + 1
        cut_to = seps[record - 1] + 1 if len(seps) >= record else None
        prefix = False
    dst = workdir / (path.name + f".skip{record}.json")
    with open(path, "rb") as fin, open(dst, "wb") as fout:
        remaining = cut_from
        while remaining > 0:
            block = fin.read(min(CHUNK, remaining))
            fout.write(block)
            remaining -= len(block)
        if cut_to is None:  # the damaged element was the last one
            fout.write(b"]")
        else:
            fin.seek(cut_to)
            if prefix:  # drop the comma that followed the removed first element
                rest = fin.read(64).lstrip()
                fout.write(rest[1:] if rest.startswith(b",") else rest)
            shutil.copyfileobj(fin, fout, CHUNK)
    return dst, cut_from


def drop_large_events(path: Path, workdir: Path, limit: int) -> tuple[Path, list[tuple[int, int]]]:
    """Copy an array without its events longer than ``limit`` bytes (what DuckDB's reader can hold of one
    object); return the new path and ``(index, size)`` of each event removed (0-based, in ``path``'s order).

    Events are delimited as in ``skip_record`` (the ``}, {`` between top-level events), in one streaming pass."""
    bounds: list[int] = []  # start offset of each event
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
        first = head.index(b"[") + 1
        lead = len(head[first:]) - len(head[first:].lstrip())
        bounds.append(first + lead)
        fh.seek(0)
        base, carry = 0, b""
        while True:
            block = fh.read(CHUNK)
            if not block:
                break
            data = carry + block
            for m in _EVENT_GAP.finditer(data):
                pos = base - len(carry) + m.end() - 1
                if pos > bounds[-1]:
                    bounds.append(pos)
            carry = data[-64:]
            base += len(block)
        size = base
    ends = bounds[1:] + [size]
    big = [(i, end - start) for i, (start, end) in enumerate(zip(bounds, ends)) if end - start > limit]
    if not big:
        return path, []
    dst = workdir / (path.name + ".small.json")
    keep_from = 0
    with open(path, "rb") as fin, open(dst, "wb") as fout:
        for i, _ in big:
            start = bounds[i]
            # cut from this event's start to the next one's, or (the last event) back to the previous event's end
            stop = bounds[i + 1] if i + 1 < len(bounds) else None
            if stop is None:
                start = _comma_before(fin, start)
            _copy_span(fin, fout, keep_from, start)
            keep_from = stop if stop is not None else size
            if stop is None:
                fout.write(b"]")
        _copy_span(fin, fout, keep_from, size)
    return dst, big


def _comma_before(fin, start: int) -> int:
    """The offset of the ',' before the event that starts at ``start`` (so that cutting from it keeps the array
    valid when the last event goes)."""
    fin.seek(max(0, start - 64))
    before = fin.read(start - max(0, start - 64))
    comma = before.rfind(b",")
    return max(0, start - 64) + comma if comma >= 0 else start


def _copy_span(fin, fout, start: int, stop: int) -> None:
    fin.seek(start)
    remaining = stop - start
    while remaining > 0:
        block = fin.read(min(CHUNK, remaining))
        if not block:
            break
        fout.write(block)
        remaining -= len(block)

