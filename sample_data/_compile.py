"""Compilation of the catalog's op templates into pre-rendered event / CSV fragments for one rank.

``TemplateCompiler`` is a mixin of ``RankSim``: it turns every (template, shape variant, thread) into a ``CNode``
tree whose JSON heads/tails and CSV prefixes are built once, so the simulation only formats the variable parts.
"""
import json

from . import _catalog as cat
from . import _csvs as out

NA = "N/A"
EVENT_WAIT = ("EVENT_WAIT", "EVENT_WAIT", "EVENT_WAIT_SQE", 0, 0, 0, False, "", "", "", "", "", "")
DURATION_SCALE = 0.6                   # global factor on the catalog's kernel durations


class Thread:
    """Pre-rendered event fragments of one Python thread."""

    def __init__(self, pid, tid):
        self.tid = tid
        self.enq = f'{{"ph": "X", "name": "Enqueue", "pid": {pid}, "tid": {tid}, "ts": "'
        self.enq_s = '{"ph": "s", "bp": "e", "name": "enqueue_to_dequeue", "id": '
        self.at = f', "pid": {pid}, "tid": {tid}, "ts": "'


class CNode:
    """A compiled torch-op node (one template x shape variant x thread)."""
    __slots__ = ("name", "head", "tail", "seq_mode", "csv_prefix", "kids", "launch", "sync", "pre_lo", "pre_span",
                 "post_lo", "post_span", "fwd_src", "bwd_dst", "th", "mem_name")


class CLaunch:
    __slots__ = ("deq", "acl", "rt", "kernels", "hccl", "secondary")


class CKernel:
    __slots__ = ("kname", "op_type", "tt", "lo", "span", "secondary", "compute", "aicore", "in_kd", "l2",
                 "metrics_kind", "block", "csv_a", "csv_b", "frags", "stats")


class TemplateCompiler:
    def _compile_all(self):
        self.fwd_nodes, self.bwd_nodes = {}, {}
        for key, (_, modfile, ftree, btree) in cat.FORWARD.items():
            for v in range(len(cat.VARIANTS)):
                node = self._compile(ftree, v, self.main, cat.call_stack(modfile, v), 0, None)
                srcs = [x for x in self._preorder(node) if x.seq_mode == 1]
                if btree is not None and srcs:
                    srcs[-1].fwd_src = True     # fwdbwd starts at the latest forward op with the seq number
                self.fwd_nodes[key, v] = node
                if btree is not None:
                    wrap = cat.Tpl(f"autograd::engine::evaluate_function: {btree.name}", pre=(3, 12), post=(8, 30),
                                   kids=[btree])
                    self.bwd_nodes[key, v] = self._compile(wrap, v, self.bwd, None, 0, None, bwd=True)
        self.dataloader = self._compile(cat.DATALOADER, 0, self.main, cat.DATALOADER_STACK, 0, None)
        self.optimizer = self._compile(cat.OPTIMIZER, 0, self.main, cat.OPTIMIZER_STACK, 0, None)
        self.step_end = self._compile(cat.STEP_END, 0, self.main, None, 0, None)
        self.comm_nodes = {k: self._compile(t, 0, self.bwd, None, 0, None) for k, t in cat.COMM.items()}
        self.wait_frags = (self._cann_frag("AscendCL@aclrtStreamWaitEvent", "ACL_RTS", "acl", "aclrtStreamWaitEvent"),
                           self._cann_frag("Runtime@StreamWaitEvent", "StreamWaitEvent", "runtime", "0"))
        self.sync_frags = (self._cann_frag("AscendCL@aclrtSynchronizeStreamWithTimeout", "ACL_RTS", "acl",
                                           "aclrtSynchronizeStreamWithTimeout", self.tid_main),
                           self._cann_frag("Runtime@StreamSynchronize", "StreamSynchronize", "runtime", "0",
                                           self.tid_main))
        self.ps_head = '{"ph": "X", "name": "ProfilerStep#'
        self.ps_mid = f'", "pid": {self.pid}, "tid": {self.tid_main}, "ts": "'

    def _preorder(self, node):
        yield node
        for k in node.kids:
            yield from self._preorder(k)

    def _compile(self, tpl, v, th, stack, depth, parent, bwd=False):
        n = CNode()
        n.name, n.th = tpl.name, th
        dims = tpl.dims.format(**cat.variant_vars(v)).replace(";", ";\r\n") if tpl.dims is not None else None
        stack_s = ";\r\n".join(stack) if (stack and depth <= 1) else None
        n.bwd_dst = bwd and depth == 1
        n.seq_mode = 2 if n.bwd_dst else (1 if tpl.seq else 0)
        n.fwd_src = False
        tail = f', "Fwd thread id": {1 if n.bwd_dst else 0}'
        if dims is not None:
            tail += f', "Input Dims": {json.dumps(dims)}'
        if stack_s is not None:
            tail += f', "Call stack": {json.dumps(stack_s)}'
        n.head = f'{{"ph": "X", "name": {json.dumps(n.name)}, "pid": {self.pid}, "tid": {th.tid}, "ts": "'
        n.tail = tail + "}}"
        n.csv_prefix = out.cells([n.name, dims or "", stack_s or ""]) + ","
        n.pre_lo, n.pre_span = tpl.pre[0] * 1000, (tpl.pre[1] - tpl.pre[0]) * 1000
        n.post_lo, n.post_span = tpl.post[0] * 1000, (tpl.post[1] - tpl.post[0]) * 1000
        n.sync = tpl.sync
        n.mem_name = parent.name if parent is not None else tpl.name
        n.launch = self._compile_launch(tpl, v) if (tpl.kernels or tpl.hccl) else None
        n.kids = tuple(self._compile(k, v, th, stack, depth + 1, n, bwd) for k in tpl.kids)
        return n

    def _compile_launch(self, tpl, v):
        L = CLaunch()
        name = tpl.name
        if tpl.hccl:
            api, mode, rt = f"hcom_{tpl.hccl}_", "HOST_HCCL", "FftsPlusTaskLaunch"
        elif name == "acl_memcpy_host_to_device":
            api, mode, rt = "aclrtMemcpyAsync", "ACL_RTS", "MemcpyAsync"
        elif name.startswith("aclnn"):
            api, mode, rt = name, "ACL_NN", "KernelLaunchWithHandle"
        else:
            api, mode, rt = "aclopCompileAndExecute", "ACL_OP", "KernelLaunch"
        deq = api if name == "acl_memcpy_host_to_device" else name
        L.deq = f'{{"ph": "X", "name": "Dequeue@{deq}", "pid": {self.pid}, "tid": {self.tid_deq}, "ts": "'
        L.acl = self._cann_frag(f"AscendCL@{api}", mode, "acl", api)
        L.rt = self._cann_frag(f"Runtime@{rt}", rt, "runtime", "0")
        L.hccl = tpl.hccl
        L.kernels = tuple(self._kernel(k, v) for k in (tpl.kernels or ()))
        L.secondary = any(k.secondary for k in L.kernels) and self.nstreams > 1
        return L

    def _cann_frag(self, name, mode, level, id_, tid=None):
        tid = tid or self.tid_deq
        head = f'{{"name": "{name}", "pid": {self.cann_pid}, "tid": {tid}, "ts": "'
        mid = f', "args": {{"Thread Id": {tid}, "Mode": "{mode}", "level": "{level}", "id": "{id_}", ' \
              f'"item_id": "0", "connection_id": '
        stats = self.apistats.setdefault((level, name.split("@", 1)[1]), [0, 0, 1 << 62, 0, 0.0])
        return head, mid, stats

    def _kernel(self, key, v):
        if (key, v) in self.kcache:
            return self.kcache[key, v]
        k = CKernel()
        spec = EVENT_WAIT if key == "EVENT_WAIT" else cat.KERNELS[key]
        k.kname, k.op_type, k.tt, lo, hi, k.block, k.secondary, ish, idt, ifm, osh, odt, ofm = spec
        scale = 1.0 if k.tt in ("DSA_SQE", "EVENT_WAIT_SQE") else cat.variant_scale(v) * DURATION_SCALE
        k.lo, k.span = int(lo * 1000 * scale), int((hi - lo) * 1000 * scale)
        k.compute = k.tt in cat.COMPUTE_TASK_TYPES
        k.aicore = k.tt == "AI_CORE"
        k.in_kd = k.tt not in cat.NOT_IN_KERNEL_DETAILS
        k.l2 = k.compute and k.tt not in ("AI_CPU", "DSA_SQE")
        k.metrics_kind = {"AI_CORE": 1, "AI_VECTOR_CORE": 2, "MIX_AIC": 3, "MIX_AIV": 3}.get(k.tt, 0)
        vars_ = cat.variant_vars(v)
        shape = lambda s: f'"{s.format(**vars_)}"' if s else NA  # noqa: E731  (shapes carry literal quotes)
        k.csv_a = out.cells([k.kname, k.op_type, "dynamic", k.tt])
        k.csv_b = out.cells([k.block, 0, "YES" if k.aicore and v % 2 == 0 else "NO", shape(ish), idt or NA,
                             ifm or NA, shape(osh), odt or NA, ofm or NA, "0" if k.tt.startswith("MIX") else NA])
        k.frags = {}
        k.stats = self.kstats.setdefault((k.op_type, k.tt), [0, 0, 1 << 62, 0]) if k.in_kd else None
        self.kcache[key, v] = k
        return k

    def _kernel_frags(self, k, si):
        sid = self.sids[si]
        k.frags[si] = f = (f'{{"name": "{k.kname}", "pid": {self.hw_pid}, "tid": {sid}, "ts": "',
                           f', "args": {{"Model Id": 4294967295, "Task Type": "{k.tt}", "Physic Stream Id": {sid}, '
                           f'"Task Id": ', ', "Batch Id": 0, "Subtask Id": 4294967295, "connection_id": ',
                           f"{sid},{k.csv_a}", f"{sid},")
        return f
