"""Hostile inputs of known shape, for the tests and ``ascendscope bench archives``: zips whose central directory
costs more than their bytes suggest, and a rank whose one slice has an absurdly long name.

* :func:`many_entries_zip`: one 1-byte member and a central directory of ``entries`` headers all pointing at it
  (about 55 bytes each: 4,000,000 entries make a 219 MB zip), zip64 end records included; ``listed`` makes the end
  record lie about the count.
* :func:`sparse_directory_zip`: an end record claiming ``listed`` entries in a directory of ``directory_bytes``
  zero bytes, written as a hole (it costs no disk): what is in the directory never matters to a check that
  refuses from the end record.
* :func:`long_name_rank`: a ``*_ascend_pt`` rank folder whose trace has two ordinary slices and one named with
  ``chars`` characters.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

ENTRY = struct.Struct("<4s4B4HL2L5H2L")
LOCAL = struct.Struct("<4s5H3L2H")
END = struct.Struct("<4s4H2LH")
LOCATOR = struct.Struct("<4sLQL")
END64 = struct.Struct("<4sQ2H2L4Q")
UNIX_FILE = 0o100644 << 16
WRITE_BATCH_BYTES = 4 << 20
LONG_NAME_CHAR = "L"


def _end_records(listed: int, size: int, start: int, end64_at: int) -> bytes:
    """The zip64 end record, its locator and the classic end record (pointing at the zip64 one)."""
    return (END64.pack(b"PK\x06\x06", END64.size - 12, 45, 45, 0, 0, listed, listed, size, start)
            + LOCATOR.pack(b"PK\x06\x07", 0, end64_at, 1)
            + END.pack(b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))


def _member() -> tuple[bytes, int]:
    """The local header and data of the one 1-byte member ``m/0``, and its CRC."""
    data, name = b"x", b"m/0"
    crc = zlib.crc32(data)
    return LOCAL.pack(b"PK\x03\x04", 20, 0, 0, 0, 0, crc, 1, 1, len(name), 0) + name + data, crc


def many_entries_zip(path: Path, entries: int, *, listed: int | None = None) -> Path:
    """A zip of one 1-byte member named ``m/0`` and a directory of ``entries`` headers (``m/0``, ``m/1``, …) that
    all point at it; the end records say ``listed`` entries (default: ``entries``)."""
    local, crc = _member()
    with open(path, "wb") as out:
        out.write(local)
        size, batch = 0, bytearray()
        for i in range(entries):
            name = b"m/%d" % i
            batch += ENTRY.pack(b"PK\x01\x02", 20, 3, 20, 0, 0, 0, 0, 0, crc, 1, 1, len(name), 0, 0, 0, 0,
                                UNIX_FILE, 0) + name
            if len(batch) >= WRITE_BATCH_BYTES:
                out.write(batch)
                size += len(batch)
                batch.clear()
        out.write(batch)
        size += len(batch)
        out.write(_end_records(entries if listed is None else listed, size, len(local), len(local) + size))
    return path


def sparse_directory_zip(path: Path, listed: int, directory_bytes: int) -> Path:
    """A zip of the one member ``m/0`` whose end records claim ``listed`` entries in a directory of
    ``directory_bytes`` bytes that are a hole of zeros (no disk used)."""
    local, _ = _member()
    with open(path, "wb") as out:
        out.write(local)
        out.truncate(len(local) + directory_bytes)
        out.seek(len(local) + directory_bytes)
        out.write(_end_records(listed, directory_bytes, len(local), len(local) + directory_bytes))
    return path


def long_name_rank(folder: Path, chars: int) -> Path:
    """``folder/rank0_ascend_pt`` with a trace of three slices on one lane: ``a``, one named by ``chars`` times
    :data:`LONG_NAME_CHAR`, and ``b``."""
    events = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "Python"}},
              {"ph": "X", "name": "a", "pid": 7, "tid": 1, "ts": "100.000", "dur": 1},
              {"ph": "X", "name": LONG_NAME_CHAR * chars, "pid": 7, "tid": 1, "ts": "101.000", "dur": 1},
              {"ph": "X", "name": "b", "pid": 7, "tid": 1, "ts": "102.000", "dur": 2.5}]
    out = folder / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace_view.json").write_text(json.dumps(events), encoding="utf-8")
    return folder
