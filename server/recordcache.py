"""The parsed run.json files of a process, each re-read only once the file changed (:class:`RecordCache`);
``RunStore.get`` reads records through it."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path

RACY_S = 1.0  # a run.json changed this recently is read again (see RecordCache)


class RecordCache:
    """Parsed run.json files, each kept with the identity of the file it came from (inode, size, mtime, ctime),
    so a request costs a ``stat`` instead of a read and a parse. A rewrite is a rename of a new file, so any
    process's rewrite changes the identity; a file modified within :data:`RACY_S` of being read is not trusted
    (its timestamp could be shared with a rewrite in the same clock tick, "racy git"), so it is read again until
    it has been still for that long. Bounded: at most ``max_entries`` files, least recently used dropped."""

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[tuple, dict]] = OrderedDict()
        self._lock = threading.Lock()
        self.reads = 0  # files actually read and parsed (tests count them)

    def read(self, path: Path) -> dict:
        st = os.stat(path)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        key = str(path)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] == stamp:
                self._entries.move_to_end(key)
                return hit[1]
        with open(path, encoding="utf-8") as src:
            data = json.loads(src.read())
            now_ns = time.time_ns()
            same = os.fstat(src.fileno())
        self.reads += 1
        read_stamp = (same.st_ino, same.st_size, same.st_mtime_ns, same.st_ctime_ns)
        with self._lock:
            if read_stamp == stamp and now_ns - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_S * 1e9:
                self._entries[key] = (stamp, data)
                self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            else:
                self._entries.pop(key, None)
        return data
