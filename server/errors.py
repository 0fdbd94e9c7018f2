"""Domain errors and the one table that says how each reaches an HTTP client.

Code below the routers raises what went wrong in its own terms (an upload refused, a query parameter the data
does not have, a query past its deadline); :data:`HTTP_ANSWERS` maps each such error class to an HTTP status and
error code, and ``server.app`` registers one handler that answers with them. A subclass not listed takes the entry
of its nearest listed base.
"""

from __future__ import annotations

from ascendscope.server.db import QueryTimeout
from ascendscope.server.queries import NotFound, QueryError
from ascendscope.server.requestclock import ClientGone


class UploadRefused(Exception):
    """An upload that does not become a run; the message says why, in words the uploader can act on."""


class NotMultipart(UploadRefused):
    pass


class UploadTooLarge(UploadRefused):
    pass


class TooManyFiles(UploadRefused):
    pass


class FieldTooLarge(UploadRefused):
    pass


class BadMultipart(UploadRefused):
    pass


class UploadInterrupted(UploadRefused):
    pass


class MissingFile(UploadRefused):
    pass


class NoProfilingData(UploadRefused):
    pass


class BadArchive(UploadRefused):
    """The archive itself is refused (``ingest.archive.ArchiveError``); subclasses name its kind."""


class NotAnArchive(BadArchive):
    pass


class EmptyArchive(BadArchive):
    pass


class CorruptArchive(BadArchive):
    pass


class EncryptedArchive(BadArchive):
    pass


class UnsafeArchive(BadArchive):
    pass


class NestedArchive(BadArchive):
    pass


class ArchiveTooLarge(BadArchive):
    pass


class NoSpaceForArchive(BadArchive):
    pass


# error class -> (HTTP status, error code); code None: the error's own ``code`` attribute
HTTP_ANSWERS: dict[type[Exception], tuple[int, str | None]] = {
    NotMultipart: (415, "not_multipart"),
    UploadTooLarge: (413, "upload_too_large"),
    TooManyFiles: (400, "too_many_files"),
    FieldTooLarge: (400, "field_too_large"),
    BadMultipart: (400, "bad_multipart"),
    UploadInterrupted: (400, "upload_interrupted"),
    MissingFile: (422, "missing_file"),
    NoProfilingData: (422, "no_profiling_data"),
    BadArchive: (400, "bad_archive"),
    NotAnArchive: (415, "not_an_archive"),
    EmptyArchive: (400, "empty_archive"),
    CorruptArchive: (400, "corrupt_archive"),
    EncryptedArchive: (422, "encrypted_archive"),
    UnsafeArchive: (422, "unsafe_archive"),
    NestedArchive: (422, "nested_archive"),
    ArchiveTooLarge: (413, "archive_too_large"),
    NoSpaceForArchive: (507, "insufficient_storage"),
    QueryError: (400, None),
    NotFound: (404, None),
    QueryTimeout: (504, "query_timeout"),
    ClientGone: (499, "client_closed_request"),  # nobody reads it: the client is gone
}


def http_answer(exc: Exception) -> tuple[int, str, str]:
    """(status, code, message) of a domain error, from the entry of its class or its nearest listed base."""
    for cls in type(exc).__mro__:
        if cls in HTTP_ANSWERS:
            status, code = HTTP_ANSWERS[cls]
            return status, code or exc.code, getattr(exc, "message", None) or str(exc)
    raise KeyError(f"{type(exc).__name__} is not a domain error")
