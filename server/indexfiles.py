"""Index entries (whole tracks, a table's flows: ``server.queries.track_index``) written once to a file in the run's
folder and mapped by every server process, instead of read from the database by each process into memory of its
own.

Read from the database, a track of 250 k slices costs 50-500 ms and its arrays are private to the process; with
several server processes (``--workers``) each read the same tracks again, and a run whose tracks in use do not
fit one process's ``track_cache_mb`` has them read in turn, again and again (docs/benchmarks.md, issue #18). An
entry read once is therefore written here, and from then on it is mapped (``mmap``): a fraction of a millisecond,
whichever process asks, before or after a restart, its pages shared through the page cache.

Layout: ``<run folder>/index/<version>/<entry>.bin``. ``<version>`` is a digest of the database file's identity
(``server.db.version``: inode, size, mtime and a sharded run's manifest), so a file replaced or a shard published
starts a new folder; ``<entry>`` is a digest of the rest of the entry's key (its kind, parameters and item, and for
a table of flows the ranks in scope). Older version folders are removed when an entry is written, once no process
has written to them for ``STALE_S`` (a process may still answer from them; a file mapped already stays readable
once removed). A file is written to a temporary name and renamed into place, so a reader sees the whole file or
none.

One file: ``MAGIC``, the header's offset and length (two little-endian u64), the arrays (each aligned to
``ALIGN`` bytes), then the header: JSON of the entry, where each array stands as ``{"a": i}`` (its dtype, shape and
offset listed), a tuple as ``{"t": [...]}``, a dict as ``{"d": {...}}``, an object array (of names) as
``{"o": [...]}``; other values are JSON's own. Arrays come back read-only: callers never mutate index entries.

Nothing here is needed for an answer: a folder that cannot be written (a read-only store) or a file that cannot be
read is logged once and left to the database path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import shutil
import struct
import threading
import time
from pathlib import Path

import numpy as np

from ascendscope.server.runs import INDEX_DIR as FOLDER

log = logging.getLogger("ascendscope.indexfiles")
MAGIC = b"ASIDX\x01\n\x00"
FORMAT = 1  # bump when an entry's structure changes (track_index's loaders): older files are then not found
ALIGN = 64
STALE_S = 120.0  # a version folder untouched this long is removed when a newer one is written
# entries of one track: its track_id names the same rows whichever ranks are in scope (ids are given per rank,
# ``ingest.layout``), so they are shared between scopes; a table of flows is named by what the scope attached
SCOPE_FREE = frozenset({"track_slices", "track_lod", "counter_samples"})
_unwritable: set[Path] = set()  # run folders whose index could not be written (logged once)
_guard = threading.Lock()


def _digest(value: object) -> str:
    return hashlib.sha1(repr(value).encode()).hexdigest()


class IndexFiles:
    """The index files of one version of one run's database (``version``: ``server.db.version`` of it)."""

    def __init__(self, run_dir: Path, version: tuple):
        self.version = version
        self.root = Path(run_dir) / FOLDER
        self.dir = self.root / _digest((FORMAT, version))[:20]

    def path(self, key: tuple) -> Path:
        """The file of the entry ``key`` (``RunDb.index_key``: the ranks in scope, or none, kind, parameters,
        item)."""
        return self.dir / f"{_digest(key)}.bin"

    @property
    def writable(self) -> bool:
        """False once writing under this run's folder failed (a read-only store): entries stay in memory."""
        return self.root.parent not in _unwritable

    def has(self, key: tuple) -> bool:
        return self.path(key).is_file()

    def load(self, key: tuple) -> object | None:
        """The entry mapped from its file; None when there is none or it cannot be read (then removed)."""
        path = self.path(key)
        try:
            return read(path)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - whatever is wrong with a cache file, the database answers
            log.warning("the index file %s cannot be read (%s): reading it from the database again", path, exc)
            try:
                path.unlink()
            except OSError:
                pass
            return None

    def save(self, key: tuple, value: object) -> object | None:
        """Write the entry and map it back (so its pages are the page cache's, shared, not this process's); None
        when it cannot be written (the caller keeps ``value``)."""
        if not self.writable:
            return None
        path = self.path(key)
        try:
            self.root.mkdir(exist_ok=True)  # (not its parents: a run deleted meanwhile is not brought back)
            self.dir.mkdir(exist_ok=True)
            write(path, value)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) and not self.root.parent.is_dir():
                return None  # the run was deleted meanwhile: nothing to write, nothing to say
            with _guard:
                first = self.root.parent not in _unwritable
                _unwritable.add(self.root.parent)
            if first:
                log.warning("cannot write index files under %s (%s): tracks are kept in memory only", self.root, exc)
            return None
        self._remove_stale()  # (a listing of a few folders: cheap beside the write)
        return self.load(key)

    def _remove_stale(self) -> None:
        """Remove the folders of older versions of the database no process has written to for ``STALE_S``."""
        cutoff = time.time() - STALE_S
        try:
            others = [p for p in self.root.iterdir() if p != self.dir and p.is_dir()]
        except OSError:
            return
        for other in others:
            try:
                if other.stat().st_mtime < cutoff:
                    shutil.rmtree(other, ignore_errors=True)
            except OSError:
                pass


def _encode(value: object, arrays: list[np.ndarray]) -> object:
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {"o": [_encode(v, arrays) for v in value.tolist()]}
        arrays.append(np.ascontiguousarray(value))
        return {"a": len(arrays) - 1}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("an index entry's dict keys must be strings")
        return {"d": {k: _encode(v, arrays) for k, v in value.items()}}
    if isinstance(value, tuple):
        return {"t": [_encode(v, arrays) for v in value]}
    if isinstance(value, list):
        return [_encode(v, arrays) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"an index entry cannot hold a {type(value).__name__}")


def _decode(value: object, arrays: list[np.ndarray]) -> object:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    (tag, inner), = value.items()
    if tag == "a":
        return arrays[inner]
    if tag == "t":
        return tuple(_decode(v, arrays) for v in inner)
    if tag == "d":
        return {k: _decode(v, arrays) for k, v in inner.items()}
    if tag == "o":
        out = np.empty(len(inner), dtype=object)
        out[:] = [_decode(v, arrays) for v in inner]
        return out
    raise ValueError(f"unknown tag {tag!r} in an index file")


def _padding(at: int) -> int:
    return -at % ALIGN


def write(path: Path, value: object) -> None:
    """Write ``value`` to ``path`` (through a temporary file renamed into place)."""
    arrays: list[np.ndarray] = []
    encoded = _encode(value, arrays)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(MAGIC + bytes(16))
            at = len(MAGIC) + 16
            table = []
            for array in arrays:
                pad = _padding(at)
                out.write(bytes(pad))
                at += pad
                table.append([array.dtype.str, list(array.shape), at])
                out.write(memoryview(array).cast("B") if array.size else b"")
                at += array.nbytes
            header = json.dumps({"format": FORMAT, "arrays": table, "value": encoded},
                                separators=(",", ":")).encode()
            out.write(header)
            out.seek(len(MAGIC))
            out.write(struct.pack("<QQ", at, len(header)))
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def read(path: Path) -> object:
    """The value written to ``path``, its arrays read-only views of the mapped file."""
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if mapped[:len(MAGIC)] != MAGIC:
        raise ValueError("not an index file")
    at, length = struct.unpack_from("<QQ", mapped, len(MAGIC))
    if at + length > len(mapped):
        raise ValueError("truncated")
    header = json.loads(mapped[at:at + length])
    if header.get("format") != FORMAT:
        raise ValueError(f"format {header.get('format')!r}, not {FORMAT}")
    arrays = []
    for dtype, shape, offset in header["arrays"]:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape)) if shape else 1
        if offset + count * dtype.itemsize > at:
            raise ValueError("an array runs past the data")
        array = np.frombuffer(mapped, dtype=dtype, count=count, offset=offset) if count else np.zeros(0, dtype)
        arrays.append(array.reshape(shape))
    return _decode(header["value"], arrays)


def mapped(array: np.ndarray) -> bool:
    """Whether the array's memory is a mapped file (its pages the page cache's, not this process's)."""
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)
