"""What every JSON router answers with: the error type, the response classes and the integer bounds.

Raise :class:`ApiError` for anything the client did wrong: it reaches the client as ``{"error": {"code": …,
"message": …, "status": …}}`` (see ``server.app``). Integer parameters are :data:`Int64` (or carry tighter
bounds): the database takes 64-bit integers, so a larger value is the client's mistake (422
``invalid_parameter`` naming it), not a database error.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

import numpy as np
import orjson
from fastapi import Header
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from ascendscope.server import columns

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
RANK_MAX = 2 ** 31 - 1  # ranks are INTEGER in the database
SHIFT_MAX_NS = 1 << 62  # a timeline shift beyond ±146 years: as far as the ingest lets a time go (TS_LIMIT)
ShiftNs = Annotated[int, Field(ge=-SHIFT_MAX_NS, le=SHIFT_MAX_NS)]


class ApiError(Exception):
    """An error the client should see: ``status`` (HTTP), a stable ``code`` and a human ``message``."""

    def __init__(self, status: int, code: str, message: str, **details: Any):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details

    def body(self) -> dict:
        err = {"code": self.code, "message": self.message, "status": self.status}
        if self.details:
            err["details"] = self.details
        return {"error": err}


class FastJSONResponse(JSONResponse):
    """Compact JSON straight from dicts/lists (no per-element ``jsonable_encoder`` walk), by orjson, which writes
    numpy columns natively (large answers are mostly such columns). NaN and infinities become null."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS,
                            default=_json_default)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):  # arrays orjson does not take natively (object, non-contiguous)
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


class ColumnsResponse(Response):
    """The compact binary answer of the column endpoints (:mod:`server.columns`)."""

    media_type = columns.MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        return columns.encode(content)


AcceptQ = Annotated[str | None, Header(
    description=f"`{columns.MEDIA_TYPE}` for the compact binary answer (typed arrays; see docs/schema.md), "
                "else JSON")]
COLUMN_RESPONSES = {200: {"description": "JSON by default; the binary columns format when `Accept` asks for it",
                          "content": {"application/json": {},
                                      columns.MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}}}}


def column_answer(result: dict, accept: str | None) -> Response:
    """``result`` as JSON, or as binary columns when ``accept`` asks for them; either way ``Vary: Accept``."""
    cls = ColumnsResponse if columns.wants_columns(accept) else FastJSONResponse
    return cls(result, headers={"Vary": "Accept"})


def fast_json(handler):
    """Route decorator: the handler's dict leaves through :class:`FastJSONResponse` directly (no response model,
    no ``jsonable_encoder`` walk), so large column answers and numpy arrays cost one encoder pass."""

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        result = handler(*args, **kwargs)
        return result if isinstance(result, Response) else FastJSONResponse(result)

    return wrapper


def ns_str(value: int | None) -> str | None:
    """Absolute epoch ns leave the server as decimal strings: they exceed 2**53, JSON numbers' exact range."""
    return None if value is None else str(int(value))
