"""A console worker process: ``ascendscope.sqlworker`` answering the SQL console's jobs
(``server.console.answer``) beside ``Run.sql``'s, started and held to its limits by ``server.consolepool``.

    python -m ascendscope.server.consoleworker FD
"""

from __future__ import annotations

import sys

from ascendscope import sqlworker
from ascendscope.server import console

MODULE = "ascendscope.server.consoleworker"

if __name__ == "__main__":
    sqlworker.main(sys.argv[1:], {"console": console.answer})
