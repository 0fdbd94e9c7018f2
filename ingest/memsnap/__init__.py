"""PyTorch / torch_npu memory snapshots (``_dump_snapshot`` pickles): read without unpickling, into DuckDB.

``pickles`` is the restricted, streaming reader's face (``read``): ``reader`` interprets the opcodes, ``rareops``
reads the rarer ones and refuses what could run code, ``fastpath`` reads the common trace entries whole, ``values``
holds what they hand over. ``load`` pairs the block lives as the entries stream and ``store`` writes the ``mem_*``
tables (``schema``), the segment pieces replayed back from the dump by ``segments``. ``ingest.readers.memsnap`` is
the reader that finds such files and stages them for a rank (docs/memsnap.md).
"""
