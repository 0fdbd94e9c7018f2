"""Fixtures of the Python API tests: the session's runs opened with ``ascendscope.open``, and a helper that compares a
DataFrame with the rows a view's JSON API answers."""

from __future__ import annotations

import math

import pytest


def records(frame) -> list[dict]:
    """DataFrame rows as plain dicts (pandas' missing values as None)."""
    rows = frame.astype(object).to_dict("records")
    return [{k: (None if _missing(v) else v) for k, v in row.items()} for row in rows]


def _missing(v) -> bool:
    try:
        import pandas as pd

        return v is pd.NA or v is None or (isinstance(v, float) and math.isnan(v))
    except TypeError:
        return False


def same_value(api, view) -> bool:
    """The API's value equals the view's: absolute times are decimal strings in JSON and integers in the API."""
    if isinstance(view, str) and isinstance(api, int) and view.lstrip("-").isdigit():
        return int(view) == api
    return api == view


def assert_rows_equal(frame, view_rows: list[dict], columns=None) -> None:
    got = records(frame)
    assert len(got) == len(view_rows), (len(got), len(view_rows))
    for i, (a, v) in enumerate(zip(got, view_rows)):
        for c in columns or a:
            if c in v:
                assert same_value(a[c], v[c]), f"row {i} column {c}: API {a[c]!r} != view {v[c]!r}"


@pytest.fixture(scope="session")
def opened(runs):
    """``{name: Run}`` of the session's store runs (level1, level0, generated), opened by their database file."""
    import ascendscope

    out = {name: ascendscope.open(db) for name, db in runs.dbs.items()}
    yield out
    for run in out.values():
        run.close()
