"""A zip's central directory, checked before ``zipfile`` reads it.

``zipfile.ZipFile`` reads the whole central directory into memory and builds one ``ZipInfo`` per entry before its
caller can count a single one: a 224 MB zip whose directory lists 4,000,000 entries (all pointing at one 1-byte
member) cost 18.7 s and 2.67 GB to refuse. :func:`check` first reads the end-of-central-directory record (and its
zip64 form), found the way ``zipfile`` finds it, and refuses from its entry count and directory size alone: more
entries than allowed, or a directory larger than that many entries can need. Then it walks the directory header
by header through a bounded buffer — the record's count may lie — counting the files and folders it really
holds and adding up the sizes their headers declare, and stops at the first entry over a limit. An archive that
passes costs ``zipfile`` at most ``2 × max_members`` entries and :func:`max_directory_bytes` bytes.
"""

from __future__ import annotations

import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from ascendscope.ingest.archive_errors import ArchiveError

END = struct.Struct("<4s4H2LH")  # end of central directory: signature, disks, entries, size, offset, comment length
END_SIGNATURE = b"PK\x05\x06"
LOCATOR = struct.Struct("<4sLQL")  # zip64 end of central directory locator
LOCATOR_SIGNATURE = b"PK\x06\x07"
END64 = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory record
END64_SIGNATURE = b"PK\x06\x06"
ENTRY = struct.Struct("<4s4B4HL2L5H2L")  # a central directory file header (46 bytes), as zipfile reads it
ENTRY_SIGNATURE = b"PK\x01\x02"
MAX_COMMENT_BYTES = 1 << 16
ZIP64_EXTRA_ID = 0x0001
ZIP64_MARK = 0xFFFFFFFF
FOLDERS_PER_MEMBER = 1  # the directory may list as many folder entries as files besides its files
DIRECTORY_BYTES_PER_ENTRY = 1024  # a header (46 bytes), a path and its extra fields: far less in practice
MIN_DIRECTORY_BYTES = 1 << 20
READ_BUFFER_BYTES = 1 << 20


@dataclass
class Directory:
    """What the central directory holds: the record's entry count, the files and folders walked, the bytes their
    headers declare (files only) and the directory's own size."""

    listed: int
    files: int
    folders: int
    declared_bytes: int
    size: int


def max_entries(max_members: int) -> int:
    return max_members * (1 + FOLDERS_PER_MEMBER)


def max_directory_bytes(max_members: int) -> int:
    return max(MIN_DIRECTORY_BYTES, max_entries(max_members) * DIRECTORY_BYTES_PER_ENTRY)


def check(path: Path, max_members: int, *, used: int = 0, where: str = "") -> Directory:
    """Refuse the zip at ``path`` (:class:`ArchiveError`) if its directory lists more than ``max_members`` files
    (``used`` of them taken already by the archive around it) or more entries or bytes than that many can need;
    else what it holds."""
    limit, size_limit = max_entries(max_members), max_directory_bytes(max_members)
    with open(path, "rb", buffering=READ_BUFFER_BYTES) as fh:
        listed, size, start = _end_record(fh, where)
        if listed > limit:
            raise ArchiveError(f"refused: the archive{where} lists {listed} entries: more than {max_members} "
                               f"members", "too_large")
        if size > size_limit:
            raise ArchiveError(f"refused: a central directory of {size / 1e6:.0f} MB in the archive{where}: more "
                               f"than {max_members} members can need", "too_large")
        found = Directory(listed, 0, 0, 0, size)
        fh.seek(start)
        walked = 0
        while walked < size:
            header = fh.read(ENTRY.size)
            if len(header) < ENTRY.size or header[:4] != ENTRY_SIGNATURE:
                raise ArchiveError(f"a corrupt archive{where}: bad central directory")
            fields = ENTRY.unpack(header)
            name_len, extra_len, comment_len, mode = fields[12], fields[13], fields[14], fields[17] >> 16
            name = fh.read(name_len)
            extra = fh.read(extra_len)
            fh.seek(comment_len, 1)
            walked += ENTRY.size + name_len + extra_len + comment_len
            if len(name) < name_len or len(extra) < extra_len or walked > size:
                raise ArchiveError(f"a corrupt archive{where}: truncated central directory")
            if name.endswith(b"/") or stat.S_ISDIR(mode):
                found.folders += 1
                if found.folders > max_members * FOLDERS_PER_MEMBER:
                    raise ArchiveError(f"refused: the archive{where} lists more than "
                                       f"{max_members * FOLDERS_PER_MEMBER} folders", "too_large")
                continue
            found.files += 1
            if found.files + used > max_members:
                raise ArchiveError(f"refused: more than {max_members} members", "too_large")
            found.declared_bytes += _file_size(fields[11], extra)
    return found


def _end_record(fh, where: str) -> tuple[int, int, int]:
    """(entries listed, directory size, where the directory starts), from the end record found as ``zipfile``
    finds it: the last 22 bytes, else the last signature within a comment's reach of the end. The directory is
    taken to end where the record (or its zip64 form) begins, as ``zipfile`` takes it (data prepended to a zip
    shifts every offset)."""
    filesize = fh.seek(0, 2)
    if filesize < END.size:
        raise ArchiveError(f"a corrupt archive{where}: too short for a zip")
    fh.seek(filesize - END.size)
    tail = fh.read(END.size)
    if tail[:4] == END_SIGNATURE and tail[-2:] == b"\0\0":
        at, record = filesize - END.size, tail
    else:
        base = max(0, filesize - MAX_COMMENT_BYTES - END.size)
        fh.seek(base)
        data = fh.read()
        found = data.rfind(END_SIGNATURE)
        if found < 0 or len(data) - found < END.size:
            raise ArchiveError(f"a corrupt archive{where}: no end of central directory")
        at, record = base + found, data[found:found + END.size]
    fields = END.unpack(record)
    listed, size, directory_end = fields[4], fields[5], at
    if at >= LOCATOR.size:
        fh.seek(at - LOCATOR.size)
        locator = LOCATOR.unpack(fh.read(LOCATOR.size))
        if locator[0] == LOCATOR_SIGNATURE:
            if locator[1] != 0 or locator[3] > 1:
                raise ArchiveError(f"a corrupt archive{where}: a zip split over several disks", "corrupt")
            if at >= LOCATOR.size + END64.size:
                fh.seek(at - LOCATOR.size - END64.size)
                record64 = END64.unpack(fh.read(END64.size))
                if record64[0] == END64_SIGNATURE:
                    listed, size = record64[7], record64[8]
                    directory_end = at - LOCATOR.size - END64.size
    start = directory_end - size
    if start < 0:
        raise ArchiveError(f"a corrupt archive{where}: its central directory would start before the file")
    return listed, size, start


def _file_size(size: int, extra: bytes) -> int:
    """A file's uncompressed size from its header, or from its zip64 extra field when the header says 0xFFFFFFFF
    (that field holds the uncompressed size first)."""
    if size != ZIP64_MARK:
        return size
    pos = 0
    while pos + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, pos)
        if kind == ZIP64_EXTRA_ID and length >= 8:
            return struct.unpack_from("<Q", extra, pos + 4)[0]
        pos += 4 + length
    return size
