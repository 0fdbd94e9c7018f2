"""PyTorch / torch_npu memory snapshots (``_dump_snapshot`` pickles): read without unpickling, into DuckDB.

``pickles`` reads the pickle's opcodes with a restricted, streaming interpreter; ``load`` streams what it reads
into the ``mem_*`` tables and derives the block and segment lives from the state at the dump (``derive``,
``segments``); ``ingest.readers.memsnap`` is the reader that finds such files and stages them for a rank.
"""
