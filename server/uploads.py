"""An upload becomes a run: the request body streamed to disk, the archive checked and extracted, then queued.

:func:`receive_upload` parses the ``multipart/form-data`` body as it arrives (never the whole file in memory) and
writes the ``file`` part into a hidden staging folder inside the runs folder (``runs/.upload-*``). Then, still in
the request, :func:`ingest.archive.unpack` extracts it under the configured limits into ``<staging>/source``, in a
process of its own (``ingest.unpackproc``: the web process never opens the archive), and discovery must find at
least one rank (or msServiceProfiler output). Only then does the staging folder get its run.json and its run id
(a rename), so the run appears complete and ``queued``, and the ingest queue picks it up.

Any refusal is a :class:`server.errors.UploadRefused` (``server.errors`` maps each kind to its 4xx answer), raised
after the staging folder is removed: a refused or interrupted upload leaves no run, no run folder and no temp
file. The client's file name is only ever displayed, never used
to build a path.

The file's SHA-256 is computed as it streams in: bytes identical to an upload that made a run (not a failed one)
are not extracted again, and the answer is that run.

The archive itself is kept in the run's folder (``upload.archive``) after the extracted files are ingested and
removed, so that Retry — of a run whose database was damaged, or made by an older ascendscope — can extract it
again; the kept archives of all runs take at most ``kept_uploads_mb`` (the oldest go first).
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from ascendscope.ingest import archive, unpackproc
from ascendscope.ingest.discover import discover
from ascendscope.ingest.serving import find as find_serving
from ascendscope.server.errors import (
    ArchiveTooLarge,
    BadArchive,
    BadMultipart,
    CorruptArchive,
    EmptyArchive,
    EncryptedArchive,
    FieldTooLarge,
    MissingFile,
    NestedArchive,
    NoProfilingData,
    NoSpaceForArchive,
    NotAnArchive,
    NotMultipart,
    TooManyFiles,
    UnsafeArchive,
    UploadInterrupted,
    UploadTooLarge,
)
from ascendscope.server.runs import SOURCE_DIR, UPLOAD_ARCHIVE, DuplicateUpload, Run, RunStore
from ascendscope.server.settings import Settings

UPLOAD_FILE = "upload.bin"
MB = 1_000_000
BODY_OVERHEAD_BYTES = 64 << 10  # multipart boundaries, part headers and the small fields
MAX_FIELD_BYTES = 4 << 10
WRITE_BATCH_BYTES = 1 << 20  # body chunks are handed to a thread in batches of this size

# ArchiveError.kind -> the refusal it is (any other kind: BadArchive)
ARCHIVE_REFUSALS: dict[str, type[BadArchive]] = {
    "not_archive": NotAnArchive,
    "empty": EmptyArchive,
    "corrupt": CorruptArchive,
    "encrypted": EncryptedArchive,
    "unsafe": UnsafeArchive,
    "nested": NestedArchive,
    "too_large": ArchiveTooLarge,
    "no_space": NoSpaceForArchive,
}


def archive_limits(settings: Settings) -> archive.Limits:
    return archive.Limits(max_members=settings.max_archive_members, max_total_bytes=settings.max_extracted_mb * MB,
                          max_ratio=settings.max_compression_ratio)


class _Body:
    """multipart callbacks: the ``file`` part goes to ``path``; the ``name`` field is kept (small)."""

    def __init__(self, path: Path, max_file_bytes: int):
        self.path, self.max_file_bytes = path, max_file_bytes
        self.out = None
        self.file_bytes = 0
        self.filename: str | None = None
        self.fields: dict[str, bytearray] = {}
        self.files_seen = 0
        self.ended = False
        self.sha256 = hashlib.sha256()
        self._header_field = bytearray()
        self._header_value = bytearray()
        self._headers: dict[str, bytes] = {}
        self._target: str | None = None  # "file", a field name, or None (ignored part)

    def callbacks(self) -> dict:
        return {"on_part_begin": self.part_begin, "on_header_field": self.header_field,
                "on_header_value": self.header_value, "on_header_end": self.header_end,
                "on_headers_finished": self.headers_finished, "on_part_data": self.part_data,
                "on_part_end": self.part_end, "on_end": self.end}

    def part_begin(self) -> None:
        self._headers, self._target = {}, None

    def header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def header_end(self) -> None:
        self._headers[bytes(self._header_field).decode("latin-1").lower()] = bytes(self._header_value)
        self._header_field, self._header_value = bytearray(), bytearray()

    def headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get("content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if name == "file" and b"filename" in options:
            self.files_seen += 1
            if self.files_seen > 1:
                raise TooManyFiles("upload one archive per request")
            self.filename = options[b"filename"].decode("utf-8", "replace")
            self.out = open(self.path, "xb")
            self._target = "file"
        elif name in ("name",):
            self._target = name
            self.fields[name] = bytearray()

    def part_data(self, data: bytes, start: int, end: int) -> None:
        if self._target == "file":
            self.file_bytes += end - start
            if self.file_bytes > self.max_file_bytes:
                raise UploadTooLarge(f"the upload is larger than the limit of {self.max_file_bytes / MB:.0f} MB")
            chunk = data[start:end]
            self.out.write(chunk)
            self.sha256.update(chunk)
        elif self._target is not None:
            field = self.fields[self._target]
            field += data[start:end]
            if len(field) > MAX_FIELD_BYTES:
                raise FieldTooLarge(f"the {self._target!r} field is too long")

    def part_end(self) -> None:
        if self._target == "file" and self.out is not None:
            self.out.close()
        self._target = None

    def end(self) -> None:
        self.ended = True

    def close(self) -> None:
        if self.out is not None and not self.out.closed:
            self.out.close()


async def receive_upload(request: Request, store: RunStore, settings: Settings) -> tuple[Run, bool]:
    """Stream, check and extract the uploaded archive; return the new queued run and False, or the existing run
    of identical bytes and True (or raise an UploadRefused)."""
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise NotMultipart("send the archive as multipart/form-data in the field 'file'")
    max_file_bytes = settings.max_upload_mb * MB
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_file_bytes + BODY_OVERHEAD_BYTES:
        raise UploadTooLarge(f"the upload is larger than the limit of {settings.max_upload_mb} MB")

    staging = await run_in_threadpool(store.new_staging_dir)
    committed = False
    body = _Body(staging / UPLOAD_FILE, max_file_bytes)
    try:
        parser = MultipartParser(boundary, callbacks=body.callbacks(),
                                 max_size=max_file_bytes + BODY_OVERHEAD_BYTES)
        batch = bytearray()
        try:
            async for chunk in request.stream():
                batch += chunk
                if len(batch) >= WRITE_BATCH_BYTES:
                    await run_in_threadpool(parser.write, bytes(batch))
                    batch.clear()
            if batch:
                await run_in_threadpool(parser.write, bytes(batch))
            parser.finalize()
        except MultipartParseError as exc:
            raise BadMultipart(f"the multipart body could not be read: {exc}") from None
        except ClientDisconnect:
            raise UploadInterrupted("the client went away before the upload finished") from None
        finally:
            body.close()
        if body.filename is None:
            raise MissingFile("no file in the field 'file' (multipart/form-data)")
        if not body.ended:
            raise UploadInterrupted("the upload ended before the multipart body was complete")
        name = bytes(body.fields.get("name", b"")).decode("utf-8", "replace").strip()
        filename = Path(body.filename.replace("\\", "/")).name or "upload"
        sha256 = body.sha256.hexdigest()
        existing = await run_in_threadpool(store.find_upload, sha256)
        if existing is not None:
            return existing, True
        try:
            run = await run_in_threadpool(_check_and_commit, store, staging, filename, name, body.file_bytes,
                                          sha256, archive_limits(settings))
        except DuplicateUpload as dup:  # the same bytes were committed while these were being extracted
            return dup.run, True
        committed = True
        await run_in_threadpool(store.trim_kept_uploads, settings.kept_uploads_mb * MB)
        return run, False
    finally:
        if not committed:
            await run_in_threadpool(shutil.rmtree, staging, True)


def _check_and_commit(store: RunStore, staging: Path, filename: str, name: str, nbytes: int, sha256: str,
                      limits: archive.Limits) -> Run:
    upload = staging / UPLOAD_FILE
    started = time.perf_counter()
    try:
        unpacked = unpackproc.unpack(upload, staging / SOURCE_DIR, limits)  # in a process of its own
    except archive.ArchiveError as exc:
        raise ARCHIVE_REFUSALS.get(exc.kind, BadArchive)(f"{filename}: {exc}") from None
    upload.rename(staging / UPLOAD_ARCHIVE)  # kept: Retry can extract it again (trim_kept_uploads bounds them)
    found = discover(staging / SOURCE_DIR)
    if not found.ranks and not find_serving(staging / SOURCE_DIR):  # serving output alone: a run of no ranks
        seen = "; ".join(f"{f}: {m}" for _, f, m in found.warnings[:3])
        raise NoProfilingData(f"{filename}: no profiling data found (expected *_ascend_pt folders with "
                              f"ASCEND_PROFILER_OUTPUT)" + (f" — {seen}" if seen else ""))
    info = {"filename": filename, "bytes": nbytes, "sha256": sha256, "members": unpacked.members,
            "extracted_bytes": unpacked.bytes_written, "nested": unpacked.nested,
            "ranks_found": len(found.ranks), "check_seconds": round(time.perf_counter() - started, 3)}
    return store.commit_staging(staging, name or archive.strip_archive_suffix(filename) or "upload", filename,
                                origin="upload", upload=info)
