"""Memory model of the generator: the PTA caching allocator and GE workspace, producing memory_record rows (in time
order, each PTA / GE row followed by a PTA+GE row) and operator_memory rows (in allocation order)."""
import heapq

from ._csvs import MB, ts_cell

MIB = 1048576
PTA_ALLOC, PTA_FREE, GE_ALLOC, GE_FREE = range(4)


class MemoryModel:
    def __init__(self, device, stream_ptr, record_file, opmem_out):
        self.dev = f"NPU:{device}"
        self.ptr = stream_ptr
        self.record = record_file          # text file for memory_record rows (they follow the APP rows)
        self.opmem = opmem_out             # CsvOut of operator_memory.csv
        self.record_rows = 0
        self.heap, self.seq = [], 0
        self.pta_alloc, self.pta_res = 936 * MIB, 1452 * MIB
        self.ge_alloc, self.ge_res = 0, int(74.75 * MIB)
        self.queue = []                    # operator_memory entries [row, complete, alloc ns], allocation order
        self.rows = []

    def _push(self, t, kind, name, size, ref):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, name, size, ref))

    def alloc_pta(self, t, name, size, free_t):
        """A block allocated at ``t`` by op ``name``; ``free_t`` None = never released in the window."""
        self._push(t, PTA_ALLOC, name, size, free_t)

    def alloc_ge(self, t, name, size, free_t):
        self._push(t, GE_ALLOC, name, size, free_t)

    @property
    def reserved_bytes(self):
        return self.pta_res + self.ge_res

    def _rows(self, ts, ge):
        pa, pr, ga, gr = self.pta_alloc / MB, self.pta_res / MB, self.ge_alloc / MB, self.ge_res / MB
        dev, ptr = self.dev, self.ptr
        # rendered by hand; identical to csv.writer output for these cells (no quoting needed)
        first = f"GE,{ts},{ga},{gr},,,{dev}\r\n" if ge else f"PTA,{ts},{pa},{pr},{pa},{ptr},{dev}\r\n"
        self.rows.append(first + f"PTA+GE,{ts},{pa + ga},{pr + gr},{pa},{ptr},{dev}\r\n")

    def flush(self, watermark, run_end=None):
        """Process allocation events before ``watermark`` (None = all). With ``run_end``, releases after it are
        dropped (the block stays unreleased in operator_memory.csv)."""
        heap = self.heap
        while heap and (watermark is None or heap[0][0] < watermark):
            t, _, kind, name, size, ref = heapq.heappop(heap)
            if run_end is not None and kind in (PTA_FREE, GE_FREE) and t > run_end:
                ref[1] = True
                continue
            ts = ts_cell(t)
            if kind == PTA_ALLOC:
                self.pta_alloc += size
                while self.pta_alloc > self.pta_res - 32 * MIB:
                    self.pta_res += 20 * MIB
                self._rows(ts, False)
                a = self.pta_alloc / MB
                entry = [[name, size / 1024, ts, "", "", "", "", a, self.pta_res / MB, a, "", "", "", self.ptr,
                          self.dev], ref is None, t]
                self.queue.append(entry)
                if ref is not None:
                    self._push(ref, PTA_FREE, name, size, entry)
            elif kind == PTA_FREE:
                self.pta_alloc -= size
                self._rows(ts, False)
                row, alloc_t = ref[0], ref[2]
                act = t - 300 - (t - alloc_t) % 500       # block returned to the cache just before the free
                a = self.pta_alloc / MB
                row[3:7] = [ts, ts_cell(act), ts_cell(t - alloc_t), ts_cell(act - alloc_t)]
                row[10:13] = [a, self.pta_res / MB, a]
                ref[1] = True
            elif kind == GE_ALLOC:
                self.ge_alloc += size
                self._rows(ts, True)
                entry = [[name, size / 1024, ts, "", "", "", "", self.ge_alloc / MB, self.ge_res / MB, "", "", "",
                          "", "", self.dev], False, t]
                self.queue.append(entry)
                self._push(ref, GE_FREE, name, size, entry)
            else:
                self.ge_alloc -= size
                self._rows(ts, True)
                row = ref[0]
                row[3] = ts
                row[5] = (t - ref[2]) / 1000
                row[10:12] = [self.ge_alloc / MB, self.ge_res / MB]
                ref[1] = True
        q = self.queue
        n = 0
        while n < len(q) and q[n][1]:
            n += 1
        if n:
            self.opmem.write([e[0] for e in q[:n]])
            del q[:n]
        if self.rows:
            self.record.write("".join(self.rows))
            self.record_rows += 2 * len(self.rows)
            self.rows.clear()
