"""Read one of the small JSON side files (profiler_info, profiler_metadata, communication*.json) into Python.

Contract: returns the parsed value, or raises ``ValueError`` with a message saying what is wrong. A UTF-8
byte-order mark at the start is skipped (Windows editors write one; the json module refuses it), bytes that are
not UTF-8 are replaced with U+FFFD, and nesting deeper than Python's parser can follow (it recurses) is a
ValueError rather than a RecursionError that would escape the callers' error handling.
"""

from __future__ import annotations

import json
from pathlib import Path


def load(path: Path):
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be read") from None
