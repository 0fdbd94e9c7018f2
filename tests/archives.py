"""Archives built in the test, in memory: the real samples zipped or tarred, and one hostile archive per rule of
``ingest.archive`` (with the status and error code the upload API must answer).

Outside targets (``OUTSIDE_NAME``) are relative or absolute paths a hostile member aims at; a test checks that no
such file appears anywhere.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

OUTSIDE_NAME = "ascendscope-escaped.txt"
ABSOLUTE_TARGET = f"/tmp/{OUTSIDE_NAME}"
PROFILE_MEMBER = "job/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
PROFILE_BYTES = b"Name,Type\nMatMul,MatMul\n"


def zip_folder(src: Path, root_name: str | None = None, *, compression=zipfile.ZIP_DEFLATED) -> bytes:
    """``src`` zipped with its files under ``root_name/`` (default: the folder's own name)."""
    buf = io.BytesIO()
    root = root_name or src.name
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for path in sorted(src.rglob("*")):
            if path.is_file():
                zf.write(path, f"{root}/{path.relative_to(src).as_posix()}")
    return buf.getvalue()


def tar_gz_folder(src: Path, root_name: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(src, arcname=root_name or src.name)
    return buf.getvalue()


def _zip(members: list[tuple], compression=zipfile.ZIP_DEFLATED) -> bytes:
    """members: (name, bytes) or (ZipInfo, bytes)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name": wanted in one hostile case
        for name, data in members:
            zf.writestr(name, data)
    return buf.getvalue()


def _zip_info(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # Unix: the high 16 bits of external_attr are st_mode
    info.external_attr = mode << 16
    return info


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]], *, gz: bool = True, fmt=tarfile.GNU_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=fmt) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(info)
    return buf.getvalue()


def _tar_info(name: str, kind=tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    return info


def _patch_zip_flags(data: bytes, flags: int) -> bytes:
    """Set the general-purpose flags of every local and central header (zipfile cannot write encrypted zips)."""
    out = bytearray(data)
    for sig, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        pos = out.find(sig)
        while pos >= 0:
            out[pos + offset:pos + offset + 2] = flags.to_bytes(2, "little")
            pos = out.find(sig, pos + 4)
    return bytes(out)


def _patch_zip_sizes(data: bytes, uncompressed: int) -> bytes:
    """Make every header claim ``uncompressed`` bytes (a member that lies about its size)."""
    out = bytearray(data)
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        pos = out.find(sig)
        while pos >= 0:
            out[pos + offset:pos + offset + 4] = uncompressed.to_bytes(4, "little")
            pos = out.find(sig, pos + 4)
    return bytes(out)


@dataclass
class Hostile:
    name: str  # test id
    filename: str
    data: bytes
    status: int
    code: str


def hostile_archives(*, max_members: int, max_extracted_bytes: int) -> list[Hostile]:
    """One refused upload per rule, sized for a server with these two limits (and a ratio limit of 200)."""
    profile = (PROFILE_MEMBER, PROFILE_BYTES)
    inner_inner = _zip([("deeper.zip", _zip([profile]))])
    dev = _tar_info("job/dev", tarfile.CHRTYPE)
    dev.devmajor, dev.devminor = 1, 3
    pax = _tar_info("job/x.csv")
    pax.pax_headers = {"comment": "x" * (2 << 20)}
    zeros = bytes(20 << 20)
    cases = [
        Hostile("not-an-archive", "notes.zip", b"this is not an archive\n" * 40, 415, "not_an_archive"),
        Hostile("empty-file", "empty.zip", b"", 400, "empty_archive"),
        Hostile("empty-zip", "nothing.zip", _zip([]), 400, "empty_archive"),
        # (a gzipped JSON trace is a single trace file, which uploads: gzipped text that is neither is refused)
        Hostile("gzip-not-tar", "notes.tar.gz", gzip.compress(b"plain notes, not a trace\n" * 100), 415,
                "not_an_archive"),
        Hostile("encrypted", "secret.zip", _patch_zip_flags(_zip([profile]), 0x1), 422, "encrypted_archive"),
        Hostile("zip-dotdot", "escape.zip", _zip([profile, (f"../../{OUTSIDE_NAME}", b"x")]), 422, "unsafe_archive"),
        Hostile("zip-backslash-dotdot", "escape2.zip", _zip([profile, (f"..\\..\\{OUTSIDE_NAME}", b"x")]), 422,
                "unsafe_archive"),
        Hostile("zip-absolute", "abs.zip", _zip([profile, (ABSOLUTE_TARGET, b"x")]), 422, "unsafe_archive"),
        Hostile("zip-symlink", "link.zip",
                _zip([profile, (_zip_info("job/link", stat.S_IFLNK | 0o777), b"/etc/passwd")]), 422,
                "unsafe_archive"),
        Hostile("zip-device", "dev.zip", _zip([profile, (_zip_info("job/dev", stat.S_IFCHR | 0o600), b"")]), 422,
                "unsafe_archive"),
        Hostile("zip-duplicate", "dup.zip", _zip([profile, profile]), 422, "unsafe_archive"),
        Hostile("zip-too-many-members", "many.zip",
                _zip([profile] + [(f"job/f{i}.txt", b"") for i in range(max_members + 1)]), 413,
                "archive_too_large"),
        Hostile("zip-too-big", "big.zip",
                _zip([profile, ("job/blob.bin", os.urandom(max_extracted_bytes + (1 << 20)))], zipfile.ZIP_STORED),
                413, "archive_too_large"),
        Hostile("zip-bomb", "bomb.zip", _zip([profile, ("job/zeros.bin", zeros)]), 413, "archive_too_large"),
        Hostile("zip-lying-size", "liar.zip", _patch_zip_sizes(_zip([("job/zeros.bin", bytes(5 << 20))]), 100), 400,
                "corrupt_archive"),
        Hostile("zip-nested-twice", "nested.zip", _zip([profile, ("job/inner.zip", inner_inner)]), 422,
                "nested_archive"),
        Hostile("zip-no-profiling-data", "notes.zip", _zip([("notes/readme.txt", b"hello")]), 422,
                "no_profiling_data"),
        Hostile("tar-dotdot", "escape.tar.gz", _tar([(_tar_info(f"../{OUTSIDE_NAME}"), b"x")]), 422, "unsafe_archive"),
        Hostile("tar-absolute", "abs.tar.gz", _tar([(_tar_info(ABSOLUTE_TARGET), b"x")]), 422, "unsafe_archive"),
        Hostile("tar-symlink", "link.tar.gz",
                _tar([(_tar_info("job/link", tarfile.SYMTYPE, "/etc/passwd"), None)]), 422, "unsafe_archive"),
        Hostile("tar-hardlink", "hard.tar",
                _tar([(_tar_info("job/hard", tarfile.LNKTYPE, "../../etc/passwd"), None)], gz=False), 422,
                "unsafe_archive"),
        Hostile("tar-fifo", "fifo.tar.gz", _tar([(_tar_info("job/fifo", tarfile.FIFOTYPE), None)]), 422,
                "unsafe_archive"),
        Hostile("tar-device", "dev.tar.gz", _tar([(dev, None)]), 422, "unsafe_archive"),
        Hostile("tar-huge-pax-header", "pax.tar.gz", _tar([(pax, b"x")], fmt=tarfile.PAX_FORMAT), 422,
                "unsafe_archive"),
        Hostile("tar-bomb", "bomb.tar.gz", _tar([(_tar_info("job/zeros.bin"), zeros)]), 413, "archive_too_large"),
    ]
    return cases


def nested_once(inner_name: str, inner: bytes) -> bytes:
    """An archive holding one archive (extracted one level deep, so accepted)."""
    return _zip([(inner_name, inner)], zipfile.ZIP_STORED)


def outside_targets(data_dir: Path) -> list[Path]:
    """Where an escaping member would have landed."""
    return [Path(ABSOLUTE_TARGET), data_dir / OUTSIDE_NAME, data_dir / "runs" / OUTSIDE_NAME,
            data_dir.parent / OUTSIDE_NAME]
