"""server.db.query's "coded" fetch: text columns come back dictionary-coded (the timeline interns slice names
from it without a Python string per row), other columns as numpy arrays, or lists when they hold NULLs."""

import duckdb
import numpy as np

from server.db import Coded, query

ROWS_SQL = """
SELECT * FROM (VALUES (1, 'mm', 10), (2, NULL, 20), (3, 'add', NULL), (4, 'mm', 40), (5, NULL, 50))
  t(id, name, dur) ORDER BY id
"""


def test_text_columns_come_back_coded_in_order_of_appearance():
    cols = query(duckdb.connect().cursor(), ROWS_SQL, fetch="coded")
    name = cols["name"]
    assert isinstance(name, Coded)
    assert name.values == ["mm", None, "add"]  # NULL is a value of its own, not a row lost
    assert [name.values[c] for c in name.codes] == ["mm", None, "add", "mm", None]
    assert isinstance(cols["id"], np.ndarray) and cols["id"].tolist() == [1, 2, 3, 4, 5]
    assert cols["dur"] == [10, 20, None, 40, 50]


def test_a_coded_column_is_cut_like_the_others():
    cols = query(duckdb.connect().cursor(), ROWS_SQL, fetch="coded")
    part = cols["name"][1:4]
    assert len(part) == 3 and [part.values[c] for c in part.codes] == [None, "add", "mm"]


def test_an_empty_answer_has_every_column():
    cols = query(duckdb.connect().cursor(), ROWS_SQL.replace("ORDER BY id", "WHERE id > 9"), fetch="coded")
    assert list(cols) == ["id", "name", "dur"]
    assert len(cols["name"]) == 0 and cols["name"].values == [] and len(cols["id"]) == 0
