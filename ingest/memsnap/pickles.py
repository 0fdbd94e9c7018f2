"""A restricted, streaming reader of memory snapshot pickles: never ``pickle.load`` on bytes a user gave us.

A snapshot (``torch.cuda.memory._dump_snapshot``, ``torch_npu.npu.memory._dump_snapshot``) is ``pickle.dump`` of
plain dicts, lists, tuples, strings, numbers and booleans. Loading an arbitrary pickle can run code (``GLOBAL`` +
``REDUCE`` call any importable function), and a snapshot of tens of GB would need several times its size in RAM as
Python objects. :func:`read` interprets the opcodes itself, one at a time, in a bounded buffer:

* it builds only dicts, lists, tuples, str, bytes, int, float, bool and None. Every opcode that names a global or
  builds an object (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, ``OBJ``, ``NEWOBJ``, ``NEWOBJ_EX``, ``REDUCE``,
  ``BUILD``, ``PERSID``, ``EXT*``, out-of-band buffers) is refused with :class:`RefusedPickle` — except the few
  globals in ``ALLOWED_GLOBALS``, which stand for a plain container (``collections.OrderedDict`` is a dict) and
  are only ever called with plain data;
* the big lists are never held: the root dict's ``segments`` list, each list of ``device_traces`` and
  ``external_annotations`` are *sinks* whose items go to the :class:`Handler` as soon as a batch of them is
  complete (a segment with its blocks, a trace entry, an annotation), and are dropped;
* the memo (what the pickle refers back to) holds 4 bytes per memoized object: an index into the values kept,
  which are the distinct strings, frames and stacks (a frame dict becomes a :class:`FrameRef`, a ``frames`` list a
  :class:`StackRef`, deduplicated by content), and the few other containers. A streamed item is a tombstone: a
  pickle that refers back to one is refused (a snapshot never does);
* every size is bounded before it is paid: one value, the stack, the nesting depth, the memo index, the distinct
  strings, frames and stacks (``Limits``), each with a clear :class:`BadPickle` naming the byte offset.
"""

from __future__ import annotations

from .reader import Reader as _Reader
from .values import BadPickle, FrameRef, Handler, Limits, RefusedPickle, StackRef, Stacks

__all__ = ["BadPickle", "FrameRef", "Handler", "Limits", "RefusedPickle", "StackRef", "Stacks", "read"]


def read(fh, handler: Handler, limits: Limits | None = None, *, fast: bool = True) -> Stacks:
    """Read the snapshot pickle from the binary file ``fh``, calling ``handler`` as items complete; return the
    distinct frames and stacks. Raises :class:`RefusedPickle` / :class:`BadPickle` (byte offsets in the
    message). The root must be a dict (a list is the oldest format: segments only, handed over as segments).
    ``fast``: read the common trace entries through ``ingest.memsnap.fastpath`` (the same result)."""
    r = _Reader(fh, handler, limits or Limits(), fast)
    root = r.run()
    if isinstance(root, list) and r.root is None:  # torch 1.x _snapshot(): the list of segments alone
        for seg in root:
            if isinstance(seg, dict):
                handler.segment(seg)
    elif not isinstance(root, dict):
        raise BadPickle(f"the pickle holds a {type(root).__name__}, not a memory snapshot's dict")
    elif "segments" not in r.sinks and "device_traces" not in r.sinks:
        raise BadPickle("the pickle's dict has neither 'segments' nor 'device_traces': not a memory snapshot")
    return r.stacks
