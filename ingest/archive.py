"""Extract an untrusted archive (.zip, .tar, .tar.gz / .tgz) of profiling folders into a folder, or refuse it whole.

Contract: :func:`unpack` writes only regular files and folders, only under ``dest``, and within :class:`Limits`.
Anything else raises :class:`ArchiveError` (its ``kind`` says which rule, the API maps it to a status) after
``dest`` has been removed. Refused:

* content that is not a zip, a tar or a gzipped tar (sniffed from the bytes, whatever the name says), an empty
  file or an archive without files, encrypted members, compression methods zipfile cannot read, corrupt data;
* member names that are absolute, carry a drive letter, ``..``, control characters, or repeat an earlier name;
* symlinks, hardlinks, devices, fifos and sparse files;
* more than ``max_members`` members, more than ``max_total_bytes`` written, or more than ``max_ratio`` × the
  archive's own size written (zip bombs). Bytes are counted as they are written, so a header that lies about a
  size gets nowhere. Both kinds are counted before they are read: a zip from its end-of-central-directory record,
  then its directory's headers, before ``zipfile`` builds an entry for each (``ingest.zipdir``); a tar header by
  header (bounded memory), because ``tarfile`` keeps every member it has read and reads an extended header (pax,
  GNU long name) into memory whole, whatever size it declares.
* Nested archives: a member named ``*.zip``/``*.tar``/``*.tar.gz``/``*.tgz`` is extracted once, into a folder of
  its name without the suffix, under the same budget, and then deleted. An archive inside that one is refused:
  extraction never goes deeper than one level.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ascendscope.ingest import zipdir
from ascendscope.ingest.archive_errors import ArchiveError

__all__ = ["ARCHIVE_SUFFIXES", "ArchiveError", "Limits", "Unpacked", "extract", "has_archive_suffix", "is_archive",
           "sniff", "strip_archive_suffix", "unpack"]

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
CHUNK_BYTES = 1 << 20
RATIO_SLACK_BYTES = 1 << 20  # tiny archives may legitimately expand past the ratio (headers, empty files)
MAX_EXTENDED_HEADER_BYTES = 1 << 20
MAX_NAME_PARTS = 32
MAX_NAME_PART_BYTES = 255
ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
TAR_FILE_TYPES = (b"0", b"\0", b"7")
TAR_DIR_TYPE = b"5"
TAR_EXTENDED_TYPES = (b"x", b"g", b"L", b"K")
TAR_TYPE_NAMES = {b"1": "a hardlink", b"2": "a symlink", b"3": "a character device", b"4": "a block device",
                  b"6": "a fifo", b"S": "a sparse file"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class Limits:
    max_members: int = 100_000
    max_total_bytes: int = 32 << 30
    max_ratio: float = 200.0


@dataclass
class Unpacked:
    members: int = 0
    bytes_written: int = 0
    nested: list[str] = field(default_factory=list)  # inner archives that were extracted


def is_archive(path: Path) -> bool:
    return path.is_file() and has_archive_suffix(path.name)


def has_archive_suffix(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def strip_archive_suffix(name: str) -> str:
    lower = name.lower()
    for suffix in ARCHIVE_SUFFIXES:
        if lower.endswith(suffix):
            return name[: -len(suffix)]
    return name


def sniff(path: Path) -> str:
    """``zip``, ``tar`` or ``tar.gz`` from the first bytes; raises :class:`ArchiveError` for anything else."""
    with open(path, "rb") as fh:
        head = fh.read(512)
    if not head:
        raise ArchiveError("the file is empty", "empty")
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as gz:
                inner = gz.read(512)
        except (OSError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"a corrupt gzip file: {exc}") from exc
        if inner[257:262] == b"ustar":
            return "tar.gz"
        raise ArchiveError("a gzip file that is not a tar archive (upload a .tar.gz or a .zip of the folders)",
                           "not_archive")
    if head[257:262] == b"ustar":
        return "tar"
    raise ArchiveError("not a .zip or .tar.gz archive", "not_archive")


def extract(path: Path, dest: Path, limits: Limits | None = None) -> Path:
    """:func:`unpack` returning ``dest`` (what the ingest pipeline needs)."""
    unpack(path, dest, limits)
    return dest


def unpack(path: Path, dest: Path, limits: Limits | None = None) -> Unpacked:
    """Extract ``path`` into the new folder ``dest`` under ``limits``; on any refusal ``dest`` is removed."""
    path, dest = Path(path), Path(dest)
    limits = limits or Limits()
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} must be a new or empty folder")
    dest.mkdir(parents=True, exist_ok=True)
    budget = _Budget(limits, path.stat().st_size)
    result = Unpacked()
    try:
        written = _unpack_one(path, dest, budget, allow_nested=True)
        for rel in written:
            if has_archive_suffix(rel.name):
                inner = dest.joinpath(*rel.parts)
                stem = strip_archive_suffix(inner.name)
                target = inner.with_name(stem or "_")
                if not stem or target.exists():
                    raise ArchiveError(f"refused: the nested archive {str(rel)!r} would be extracted over "
                                       f"{target.name!r}", "unsafe")
                target.mkdir()
                _unpack_one(inner, target, budget, allow_nested=False, label=str(rel))
                inner.unlink()
                result.nested.append(str(rel))
        if budget.members == 0:
            raise ArchiveError("the archive holds no files", "empty")
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    result.members, result.bytes_written = budget.members, budget.written
    return result


class _Budget:
    """What the whole extraction (outer archive and nested ones) may still write."""

    def __init__(self, limits: Limits, archive_bytes: int):
        self.limits = limits
        by_ratio = int(limits.max_ratio * max(1, archive_bytes)) + RATIO_SLACK_BYTES
        self.max_bytes = min(limits.max_total_bytes, by_ratio)
        self.by_ratio = by_ratio < limits.max_total_bytes
        self.members = 0
        self.written = 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise ArchiveError(f"refused: more than {self.limits.max_members} members", "too_large")

    def check(self, total: int) -> None:
        if total > self.max_bytes:
            if self.by_ratio:
                raise ArchiveError(f"refused: expands to more than {self.limits.max_ratio:g}× its own size "
                                   f"(a zip bomb?)", "too_large")
            raise ArchiveError(f"refused: more than {self.limits.max_total_bytes / 1e6:.0f} MB uncompressed",
                               "too_large")

    def add(self, n: int) -> None:
        self.written += n
        self.check(self.written)


def _unpack_one(path: Path, dest: Path, budget: _Budget, *, allow_nested: bool, label: str = "") -> list:
    kind = sniff(path)
    where = f" in {label!r}" if label else ""
    try:
        if kind == "zip":
            return _unpack_zip(path, dest, budget, allow_nested, where)
        return _unpack_tar(path, dest, budget, allow_nested, where, kind == "tar.gz")
    except ArchiveError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile,
            NotImplementedError, RuntimeError, ValueError) as exc:
        raise ArchiveError(f"a corrupt archive{where}: {exc}") from exc
    except OSError as exc:
        if exc.errno is None:  # decompressors report bad data as a bare OSError
            raise ArchiveError(f"a corrupt archive{where}: {exc}") from exc
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ArchiveError("not enough disk space to extract the archive", "no_space") from exc
        if exc.errno in (errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EINVAL):
            raise ArchiveError(f"refused: cannot write a member{where} ({exc.strerror})", "unsafe") from exc
        raise


def _member_path(name: str, *, allow_nested: bool, where: str) -> PurePosixPath | None:
    """The member's path relative to the destination, or None for the archive's own root folder."""
    shown = name if len(name) <= 200 else name[:200] + "…"
    if not name or _CONTROL.search(name):
        raise ArchiveError(f"refused: member name {shown!r}{where} is empty or has control characters", "unsafe")
    text = name.replace("\\", "/")
    if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
        raise ArchiveError(f"refused: member {shown!r}{where} has an absolute path", "unsafe")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"refused: member {shown!r}{where} points outside the archive folder", "unsafe")
    if len(parts) > MAX_NAME_PARTS or any(len(p.encode("utf-8", "surrogateescape")) > MAX_NAME_PART_BYTES
                                          for p in parts):
        raise ArchiveError(f"refused: member {shown!r}{where} has too long a path", "unsafe")
    if not parts:
        return None
    rel = PurePosixPath(*parts)
    if not allow_nested and has_archive_suffix(rel.name):
        raise ArchiveError(f"refused: {shown!r}{where} is an archive nested two levels deep (ascendscope "
                           f"extracts one level of nested archives)", "nested")
    return rel


def _make_dirs(dest: Path, rel: PurePosixPath) -> None:
    target = dest
    for part in rel.parts:
        target = target / part
        try:
            target.mkdir()
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(target).st_mode):
                raise ArchiveError(f"refused: {str(rel)!r} is both a file and a folder", "unsafe") from None


def _write(src, dest: Path, rel: PurePosixPath, budget: _Budget, member_cap: int | None, where: str) -> None:
    """Copy one member's bytes, counting them against the budget (and the member's own ratio cap)."""
    _make_dirs(dest, rel.parent)
    target = dest.joinpath(*rel.parts)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise ArchiveError(f"refused: member {str(rel)!r}{where} appears twice", "unsafe") from None
    done = 0
    with os.fdopen(fd, "wb") as out:
        while chunk := src.read(CHUNK_BYTES):
            done += len(chunk)
            budget.add(len(chunk))
            if member_cap is not None and done > member_cap:
                raise ArchiveError(f"refused: member {str(rel)!r}{where} expands to more than "
                                   f"{budget.limits.max_ratio:g}× its compressed size (a zip bomb?)", "too_large")
            out.write(chunk)


def _unpack_zip(path: Path, dest: Path, budget: _Budget, allow_nested: bool, where: str) -> list:
    written: list[PurePosixPath] = []
    # counted from the end record and the directory's headers before zipfile builds an entry for each
    listed = zipdir.check(path, budget.limits.max_members, used=budget.members, where=where)
    budget.check(budget.written + listed.declared_bytes)  # honest headers fail fast
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        plan = []
        for info in infos:
            if info.flag_bits & 0x41 or info.compress_type == 99:
                raise ArchiveError(f"refused: the archive{where} is encrypted", "encrypted")
            if info.compress_type not in ZIP_METHODS:
                raise ArchiveError(f"refused: member {info.filename!r}{where} uses compression method "
                                   f"{info.compress_type}, which is not supported", "corrupt")
            file_type = stat.S_IFMT(info.external_attr >> 16)  # 0: no type recorded (zipfile.writestr), a file
            dos_reparse_point = info.external_attr & 0x400
            if dos_reparse_point or file_type not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise ArchiveError(f"refused: member {info.filename!r}{where} is a link or a device file", "unsafe")
            rel = _member_path(info.filename, allow_nested=allow_nested or info.is_dir(), where=where)
            plan.append((info, rel))
        for info, rel in plan:
            if rel is None:
                continue
            if info.is_dir() or stat.S_ISDIR(info.external_attr >> 16):
                _make_dirs(dest, rel)
                continue
            budget.member()
            cap = int(budget.limits.max_ratio * max(1, info.compress_size)) + RATIO_SLACK_BYTES
            with zf.open(info) as src:
                _write(src, dest, rel, budget, cap, where)
            written.append(rel)
    return written


def _unpack_tar(path: Path, dest: Path, budget: _Budget, allow_nested: bool, where: str, gz: bool) -> list:
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as stream:
        _scan_tar(stream, budget, where)
    written: list[PurePosixPath] = []
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as stream, tarfile.open(fileobj=stream, mode="r|") as tf:
        for member in tf:
            rel = _member_path(member.name, allow_nested=allow_nested or member.isdir(), where=where)
            if member.isdir():
                if rel is not None:
                    _make_dirs(dest, rel)
                continue
            if not member.isreg() or member.type == tarfile.GNUTYPE_SPARSE:
                raise ArchiveError(f"refused: member {member.name!r}{where} is a link or a device file", "unsafe")
            if rel is None:
                raise ArchiveError(f"refused: a file member{where} has no name", "unsafe")
            budget.member()
            src = tf.extractfile(member)
            _write(src, dest, rel, budget, None, where)
            written.append(rel)
    return written


def _scan_tar(stream, budget: _Budget, where: str) -> None:
    """Walk the tar headers without keeping data: refuse link/device types, oversized extended headers, sizes
    that break the budget and more members than allowed, before anything is written."""
    members, declared, size_override = budget.members, budget.written, None
    while True:
        header = stream.read(512)
        if len(header) < 512 or header == bytes(512):
            return  # end of archive (tarfile is as lenient about a missing end marker)
        if _tar_checksum(header) != _tar_number(header[148:156], where):
            raise ArchiveError(f"a corrupt tar archive{where}: bad header checksum")
        kind = header[156:157]
        size = _tar_number(header[124:136], where)
        if kind in TAR_EXTENDED_TYPES:
            if size > MAX_EXTENDED_HEADER_BYTES:
                raise ArchiveError(f"refused: an extended tar header{where} of {size} bytes", "unsafe")
            data = _read_blocks(stream, size, where)
            pax_size = _pax_size(data, where) if kind in (b"x", b"g") else None
            if kind == b"g" and pax_size is not None:
                raise ArchiveError(f"refused: a global tar header{where} sets member sizes", "unsafe")
            size_override = pax_size if pax_size is not None else size_override
            continue
        if size_override is not None:
            size, size_override = size_override, None
        if kind in TAR_TYPE_NAMES:
            name = header[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
            raise ArchiveError(f"refused: member {name!r}{where} is {TAR_TYPE_NAMES[kind]}", "unsafe")
        if kind == TAR_DIR_TYPE:
            continue
        if kind not in TAR_FILE_TYPES:
            raise ArchiveError(f"refused: a tar member{where} of unknown type {kind!r}", "unsafe")
        members += 1
        if members > budget.limits.max_members:
            raise ArchiveError(f"refused: more than {budget.limits.max_members} members", "too_large")
        declared += size
        budget.check(declared)
        _skip_blocks(stream, size, where)


def _tar_number(field_bytes: bytes, where: str) -> int:
    if field_bytes[:1] and field_bytes[0] & 0x80:  # GNU base-256
        if field_bytes[0] == 0xFF:
            raise ArchiveError(f"a corrupt tar archive{where}: negative number in a header")
        return int.from_bytes(bytes([field_bytes[0] & 0x7F]) + field_bytes[1:], "big")
    text = field_bytes.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise ArchiveError(f"a corrupt tar archive{where}: bad number in a header") from None


def _tar_checksum(header: bytes) -> int:
    return sum(header[:148]) + 8 * 32 + sum(header[156:])


def _read_blocks(stream, size: int, where: str) -> bytes:
    padded = -(-size // 512) * 512
    data = stream.read(padded)
    if len(data) < padded:
        raise ArchiveError(f"a truncated tar archive{where}")
    return data[:size]


def _skip_blocks(stream, size: int, where: str) -> None:
    left = -(-size // 512) * 512
    while left:
        got = len(stream.read(min(left, CHUNK_BYTES)))
        if not got:
            raise ArchiveError(f"a truncated tar archive{where}")
        left -= got


def _pax_size(data: bytes, where: str) -> int | None:
    """The ``size`` record of a pax header, if any ("<length> <key>=<value>\\n" records)."""
    pos, size = 0, None
    while pos < len(data) and data[pos:pos + 1] not in (b"", b"\0"):
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise ArchiveError(f"a corrupt pax header{where}") from None
        if space < 0 or length <= 0 or pos + length > len(data):
            raise ArchiveError(f"a corrupt pax header{where}")
        key, _, value = data[space + 1:pos + length - 1].partition(b"=")
        if key == b"size":
            try:
                size = int(value)
            except ValueError:
                raise ArchiveError(f"a corrupt pax header{where}: bad size") from None
            if size < 0:
                raise ArchiveError(f"a corrupt pax header{where}: negative size")
        pos += length
    return size
