"""Extract a .zip / .tar(.gz) of profiling folders into a work folder, refusing anything that could escape it.

Members with absolute paths or ``..`` components, links and device files are refused (the whole archive is,
since a hostile archive should not half-load). Limits on member count and total size guard against bombs.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


class ArchiveError(Exception):
    """The archive was refused; the message says why."""


@dataclass
class Limits:
    max_members: int = 200_000
    max_total_bytes: int = 64 << 30
    max_ratio: float = 200.0


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES)


def _safe_name(name: str) -> PurePosixPath:
    name = name.replace("\\", "/")
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith("/") or (len(name) > 1 and name[1] == ":") or ".." in p.parts:
        raise ArchiveError(f"refused: member {name!r} points outside the archive folder")
    return p


def extract(path: Path, dest: Path, limits: Limits | None = None) -> Path:
    limits = limits or Limits()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if path.name.lower().endswith(".zip"):
            _extract_zip(path, dest, limits)
        else:
            _extract_tar(path, dest, limits)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise ArchiveError(f"not a readable archive: {exc}") from exc
    except ArchiveError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _extract_zip(path: Path, dest: Path, limits: Limits) -> None:
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        if len(infos) > limits.max_members:
            raise ArchiveError(f"refused: {len(infos)} members (limit {limits.max_members})")
        total = sum(i.file_size for i in infos)
        packed = max(1, sum(i.compress_size for i in infos))
        if total > limits.max_total_bytes or total / packed > limits.max_ratio:
            raise ArchiveError("refused: uncompressed size or compression ratio over the limit")
        for info in infos:
            if info.flag_bits & 0x1:
                raise ArchiveError("refused: the archive is encrypted")
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode) or (mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))):
                raise ArchiveError(f"refused: member {info.filename!r} is a link or device file")
            _safe_name(info.filename)
        for info in infos:
            target = dest / _safe_name(info.filename)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)


def _extract_tar(path: Path, dest: Path, limits: Limits) -> None:
    with tarfile.open(path) as tf:
        members = tf.getmembers()
        if len(members) > limits.max_members:
            raise ArchiveError(f"refused: {len(members)} members (limit {limits.max_members})")
        total = sum(m.size for m in members)
        if total > limits.max_total_bytes or total / max(1, path.stat().st_size) > limits.max_ratio:
            raise ArchiveError("refused: uncompressed size or compression ratio over the limit")
        for m in members:
            _safe_name(m.name)
            if not (m.isfile() or m.isdir()):
                raise ArchiveError(f"refused: member {m.name!r} is a link or device file")
        for m in members:
            target = dest / _safe_name(m.name)
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tf.extractfile(m)
            if src is None:
                continue
            with src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            os.chmod(target, 0o644)
