"""SQL macros shared by every reader: exact unit conversion at the edge of ingest.

Profiler timestamps are µs strings with ns decimals ("1736408883694756.090", CSV cells add a TAB). A float64
cannot hold them to the ns, so the conversion is a fixed-point parse straight to whole ns: DECIMAL(19, 3) µs
(DECIMAL(19, 6) ms) holds every value an int64 of ns can, rounds extra decimals once to the nearest ns, and is
about twice as fast as a wider decimal. A value beyond the int64 range of ns becomes NULL, not an error.
"""

MACROS = [
    # µs text -> exact integer ns (rounded to the nearest ns past 3 decimals); the DECIMAL cast accepts the
    # CSVs' trailing TAB and spreadsheet exponents, and gives NULL for N/A and empty cells
    """CREATE OR REPLACE TEMP MACRO us_to_ns(s) AS TRY_CAST(TRY_CAST(s AS DECIMAL(19, 3)) * 1000 AS BIGINT)""",
    """CREATE OR REPLACE TEMP MACRO ms_to_ns(s) AS TRY_CAST(TRY_CAST(s AS DECIMAL(19, 6)) * 1000000 AS BIGINT)""",
    # NaN and infinities ("NaN", "inf", "1e999") are no measurement: NULL, like any cell that is not a number
    """CREATE OR REPLACE TEMP MACRO to_double(s) AS CASE WHEN isfinite(TRY_CAST(s AS DOUBLE))
                                                        THEN TRY_CAST(s AS DOUBLE) END""",
    # integers written as "12", "12.0" or (by spreadsheets) "1.2E+3"
    """CREATE OR REPLACE TEMP MACRO to_bigint(s) AS TRY_CAST(s AS BIGINT)""",
    # a cell with no value: empty, blank or N/A
    """CREATE OR REPLACE TEMP MACRO is_blank(s) AS s IS NULL OR regexp_full_match(s, '\\s*(N/?A|None|null)?\\s*')""",
    # a cell a spreadsheet rewrote in scientific notation: the value kept only ~6 significant digits
    """CREATE OR REPLACE TEMP MACRO is_sci(s) AS (contains(s, 'e') OR contains(s, 'E'))
                                            AND regexp_matches(s, '[0-9][eE][-+]?[0-9]')""",
]


def install(con) -> None:
    for sql in MACROS:
        con.execute(sql)
