"""Read one of the small JSON side files (profiler_info, profiler_metadata, communication*.json) into Python.

Contract: returns the parsed value, or raises ``ValueError`` with a message saying what is wrong. A UTF-8
byte-order mark at the start is skipped (Windows editors write one; the json module refuses it), bytes that are
not UTF-8 are replaced with U+FFFD, and nesting deeper than Python's parser can follow (it recurses) is a
ValueError rather than a RecursionError that would escape the callers' error handling.

:func:`max_depth` measures how deep JSON text nests without parsing it (no recursion), for the callers that must
refuse deep values before a recursive parser or encoder meets them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import orjson

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def load(path: Path):
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    try:
        return orjson.loads(text)  # faster than the json module (a thousand ranks have thousands of such files)
    except orjson.JSONDecodeError:
        pass  # what orjson refuses (NaN, Infinity, huge integers, deep nesting, a broken file) goes to json
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be read") from None


def max_depth(text: str) -> int:
    """How deep the brackets of JSON text nest (those inside strings not counted), found without recursion or a
    Python loop over the characters."""
    if "[" not in text and "{" not in text:
        return 0
    chars = np.frombuffer(_STRING.sub("", text).encode("utf-8", "replace"), dtype=np.uint8)
    steps = np.isin(chars, (ord("["), ord("{"))).astype(np.int64) - np.isin(chars, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max(initial=0))
