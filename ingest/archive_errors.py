"""The one error of archive extraction (``ingest.archive``, ``ingest.zipdir``, ``ingest.unpackproc``)."""

from __future__ import annotations


class ArchiveError(Exception):
    """The archive was refused; the message says why. ``kind``: not_archive, empty, corrupt, encrypted, unsafe,
    nested, too_large or no_space."""

    def __init__(self, message: str, kind: str = "corrupt"):
        super().__init__(message)
        self.kind = kind
