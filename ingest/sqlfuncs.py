"""SQL macros shared by every reader: exact unit conversion at the edge of ingest.

Profiler timestamps are µs strings with ns decimals ("1736408883694756.090", CSV cells add a TAB). A float64
cannot hold them to the ns, so the conversion goes through DECIMAL(38,9), which is exact for any value the
profilers write; the common "<digits>.<3 digits>" form takes a faster pure-integer path.
"""

WHITESPACE = "' ' || chr(9) || chr(10) || chr(13) || '\"'"

MACROS = [
    # text cleaned of TAB/quotes/blank; NULL for empty and N/A
    f"""CREATE OR REPLACE TEMP MACRO clean_num(s) AS
        CASE WHEN trim(CAST(s AS VARCHAR), {WHITESPACE}) IN ('', 'N/A', 'NA', 'None', 'null') THEN NULL
             ELSE trim(CAST(s AS VARCHAR), {WHITESPACE}) END""",
    # µs text -> exact integer ns (rounded to the nearest ns when more than 3 decimals)
    """CREATE OR REPLACE TEMP MACRO us_to_ns(s) AS
        CASE WHEN clean_num(s)[-4:-4] = '.' AND TRY_CAST(replace(clean_num(s), '.', '') AS BIGINT) IS NOT NULL
             THEN CAST(replace(clean_num(s), '.', '') AS BIGINT)
             ELSE CAST(ROUND(TRY_CAST(clean_num(s) AS DECIMAL(38, 9)) * 1000) AS BIGINT) END""",
    """CREATE OR REPLACE TEMP MACRO ms_to_ns(s) AS
        CAST(ROUND(TRY_CAST(clean_num(s) AS DECIMAL(38, 9)) * 1000000) AS BIGINT)""",
    """CREATE OR REPLACE TEMP MACRO to_double(s) AS TRY_CAST(clean_num(s) AS DOUBLE)""",
    # integers written as "12", "12.0" or (by spreadsheets) "1.2E+3"
    """CREATE OR REPLACE TEMP MACRO to_bigint(s) AS
        coalesce(TRY_CAST(clean_num(s) AS BIGINT), CAST(ROUND(TRY_CAST(clean_num(s) AS DOUBLE)) AS BIGINT))""",
    # a cell a spreadsheet rewrote in scientific notation: the value kept only ~6 significant digits
    """CREATE OR REPLACE TEMP MACRO is_sci(s) AS regexp_matches(coalesce(clean_num(s), ''), '^-?[0-9.]+[eE][-+]?[0-9]+$')""",
]


def install(con) -> None:
    for sql in MACROS:
        con.execute(sql)
