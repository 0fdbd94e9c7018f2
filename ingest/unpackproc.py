"""An untrusted archive is extracted in a process of its own, never in the process that calls :func:`unpack`.

The web process hands an upload (and a Retry its kept archive) to :func:`unpack`, which runs
:func:`ingest.archive.unpack` in a fresh interpreter (``python -m ascendscope.ingest.unpackproc``) and returns its
:class:`~ingest.archive.Unpacked`, or raises its :class:`~ingest.archive_errors.ArchiveError`, as if it had run in
the caller. The child lowers its own CPU priority and caps its address space (RLIMIT_AS, :func:`memory_limit`:
room for the largest central directory the limits let through, and the decompressors), so an archive that
costs more than its checks foresaw costs the child, not the server: a child that runs out of memory, is killed or
crashes is an ArchiveError too, and its half-written ``dest`` is removed. The caller pays for a process start
(about 0.1 s) and holds none of the archive's bytes or entries.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ascendscope.ingest.archive import Limits, Unpacked
from ascendscope.ingest.archive import unpack as unpack_here
from ascendscope.ingest.archive_errors import ArchiveError
from ascendscope.ingest.zipdir import max_directory_bytes

BASE_MEMORY_BYTES = 1 << 30  # the interpreter, zlib/bz2/lzma state and a tar's 1 MB extended headers
DIRECTORY_COPIES = 4  # zipfile holds the directory's bytes, a BytesIO of them and an entry object per header
NICE_INCREMENT = 10  # below the web process, which keeps answering meanwhile
MAX_STDERR_CHARS = 2000

log = logging.getLogger("ascendscope.archive")


def memory_limit(limits: Limits) -> int:
    """The child's address-space cap for these limits, in bytes."""
    return BASE_MEMORY_BYTES + DIRECTORY_COPIES * max_directory_bytes(limits.max_members)


def unpack(path: Path, dest: Path, limits: Limits | None = None) -> Unpacked:
    """:func:`ingest.archive.unpack` of ``path`` into the new folder ``dest``, run in a child process."""
    limits = limits or Limits()
    args = {"path": str(path), "dest": str(dest), "max_members": limits.max_members,
            "max_total_bytes": limits.max_total_bytes, "max_ratio": limits.max_ratio,
            "memory_bytes": memory_limit(limits)}
    flags = ["-P"] if sys.version_info >= (3, 11) else []  # (no working folder on its import path)
    done = subprocess.run([sys.executable, *flags, "-m", __name__, json.dumps(args)], stdin=subprocess.DEVNULL,
                          capture_output=True, check=False)
    try:
        answer = json.loads(done.stdout.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = None
    if isinstance(answer, dict) and "unpacked" in answer:
        return Unpacked(**answer["unpacked"])
    shutil.rmtree(dest, ignore_errors=True)
    if isinstance(answer, dict) and "error" in answer:
        raise ArchiveError(answer["error"]["message"], answer["error"]["kind"])
    if isinstance(answer, dict) and "os_error" in answer:  # the server's own disk, not the archive: as if here
        raise OSError(answer["os_error"]["errno"], answer["os_error"]["strerror"])
    stderr = done.stderr.decode("utf-8", "replace")
    log.error("the process extracting %s exited with %s:\n%s", path, done.returncode, stderr[-MAX_STDERR_CHARS:])
    if done.returncode < 0 or "MemoryError" in stderr:
        raise ArchiveError("refused: extracting the archive took more memory than it may use", "too_large")
    raise ArchiveError(f"the archive could not be extracted (the extracting process failed with exit code "
                       f"{done.returncode})", "corrupt")


def _main(raw: str) -> int:
    args = json.loads(raw)
    _confine(int(args["memory_bytes"]))
    limits = Limits(max_members=int(args["max_members"]), max_total_bytes=int(args["max_total_bytes"]),
                    max_ratio=float(args["max_ratio"]))
    try:
        result = unpack_here(Path(args["path"]), Path(args["dest"]), limits)
    except ArchiveError as exc:
        answer = {"error": {"message": str(exc), "kind": exc.kind}}
    except MemoryError:
        shutil.rmtree(args["dest"], ignore_errors=True)
        answer = {"error": {"message": "refused: extracting the archive took more memory than it may use",
                            "kind": "too_large"}}
    except OSError as exc:  # (unpack removed dest)
        answer = {"os_error": {"errno": exc.errno, "strerror": exc.strerror or str(exc)}}
    else:
        answer = {"unpacked": {"members": result.members, "bytes_written": result.bytes_written,
                               "nested": result.nested}}
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


def _confine(memory_bytes: int) -> None:
    try:
        os.nice(NICE_INCREMENT)
    except OSError:
        pass
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ImportError, ValueError, OSError):  # not on this platform: the checks still bound what it reads
        pass


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
