"""Errors below the routers are domain errors; one table (``server.errors.HTTP_ANSWERS``) and one handler turn them
into the API's answers: uploads refuse with their own exception classes, queries with QueryError / NotFound, and a
router never wraps a query call to translate its errors."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ascendscope.server import errors, uploads
from ascendscope.server.db import QueryTimeout
from ascendscope.server.queries import NotFound, QueryError

SERVER = Path(__file__).resolve().parents[2] / "server"
# ingest.archive.ArchiveError.kind -> the answer an upload of such an archive has always had
ARCHIVE_ANSWERS = {
    "not_archive": (415, "not_an_archive"), "empty": (400, "empty_archive"), "corrupt": (400, "corrupt_archive"),
    "encrypted": (422, "encrypted_archive"), "unsafe": (422, "unsafe_archive"), "nested": (422, "nested_archive"),
    "too_large": (413, "archive_too_large"), "no_space": (507, "insufficient_storage"),
}


def subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


def test_every_upload_refusal_has_an_answer():
    missing = [c.__name__ for c in subclasses(errors.UploadRefused) if c not in errors.HTTP_ANSWERS]
    assert not missing


def test_archive_refusals_answer_as_they_always_did():
    answers = {kind: errors.http_answer(cls("x"))[:2] for kind, cls in uploads.ARCHIVE_REFUSALS.items()}
    assert answers == ARCHIVE_ANSWERS
    assert errors.http_answer(errors.BadArchive("x"))[:2] == (400, "bad_archive")


def test_uploads_raise_no_http_errors():
    tree = ast.parse((SERVER / "uploads.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"ascendscope.server.api", "fastapi", "fastapi.exceptions", "starlette.exceptions"}


def test_routers_call_queries_without_a_guard():
    callers = []
    for path in sorted((SERVER / "api").glob("*.py")):
        calls = [n for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and getattr(n.func, "id", None) in ("guard", "_guard")]
        callers += [f"{path.name}:{n.lineno}" for n in calls]
    assert not callers


class Unlisted(NotFound):
    pass


@pytest.mark.parametrize("exc, answer", [
    (QueryError("bad_sort", "cannot sort by 'x'"), (400, "bad_sort", "cannot sort by 'x'")),
    (NotFound("track_not_found", "no track with id 7"), (404, "track_not_found", "no track with id 7")),
    (Unlisted("slice_not_found", "no slice"), (404, "slice_not_found", "no slice")),
    (QueryTimeout("query took longer than 1 s"), (504, "query_timeout", "query took longer than 1 s")),
    (errors.UploadTooLarge("the upload is larger than the limit"),
     (413, "upload_too_large", "the upload is larger than the limit")),
])
def test_the_app_answers_domain_errors_from_the_table(tmp_path, exc, answer):
    from ascendscope.server.app import create_app
    from ascendscope.server.settings import Settings

    app = create_app(Settings.from_env(environ={}, data_dir=str(tmp_path)))

    @app.get("/api/raise")
    def raise_it():
        raise exc

    with TestClient(app) as client:
        got = client.get("/api/raise")
    status, code, message = answer
    assert got.status_code == status
    assert got.json() == {"error": {"code": code, "message": message, "status": status}}
