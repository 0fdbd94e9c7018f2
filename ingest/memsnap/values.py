"""What the restricted snapshot reader (``ingest.memsnap.reader``) hands over and how it fails: the errors, the
limits it keeps to, the deduplicated frames and stacks, and the :class:`Handler` it calls as items complete."""

from __future__ import annotations

from dataclasses import dataclass, field


class BadPickle(ValueError):
    """Not a snapshot we can read: damaged, cut short, too big in one of its parts, or another kind of pickle."""


class RefusedPickle(BadPickle):
    """The pickle asks for something that could run code (a global, an object built by a call)."""


@dataclass
class Limits:
    value_bytes: int = 64 << 20  # one string or bytes value
    stack_items: int = 1 << 20  # items on the stack outside the sinks (a batch is 1,000)
    depth: int = 256  # nested MARKs
    memo_gap: int = 1 << 20  # how far past the memo's end a PUT may write
    list_items: int = 4 << 20  # one list that is not a sink (a segment's blocks, a frames list)
    kept_bytes: int = 512 << 20  # the distinct strings, frames and stacks kept (estimated)


class FrameRef:
    """One distinct frame: its id in ``Stacks.frames``."""

    __slots__ = ("id",)

    def __init__(self, id: int):
        self.id = id


class StackRef:
    """One distinct stack (a ``frames`` list): its id in ``Stacks.stacks``."""

    __slots__ = ("id",)

    def __init__(self, id: int):
        self.id = id


@dataclass
class Stacks:
    """The distinct frames ``(filename, line, name)`` and stacks (tuples of frame ids, innermost first) seen so
    far; ids are dense from 0. ``frame_extra`` keeps a frame's keys beyond those three (FX debug fields)."""

    frames: list[tuple] = field(default_factory=list)
    stacks: list[tuple[int, ...]] = field(default_factory=list)
    frame_ids: dict = field(default_factory=dict)
    stack_ids: dict = field(default_factory=dict)
    kept_bytes: int = 0

    def frame(self, d: dict) -> FrameRef:
        name, filename, line = d.get("name"), d.get("filename"), d.get("line")
        key = (str(filename) if filename is not None else "", line if isinstance(line, int) else None,
               str(name) if name is not None else "")
        ref = self.frame_ids.get(key)
        if ref is None:
            ref = self.frame_ids[key] = FrameRef(len(self.frames))
            self.frames.append(key)
            self.kept_bytes += 200 + len(key[0]) + len(key[2])
        return ref

    def stack(self, items: list) -> StackRef:
        ids = []
        for f in items:
            if isinstance(f, dict):
                f = self.frame(f)
            if not isinstance(f, FrameRef):
                raise BadPickle("a frames list holds something other than frames")
            ids.append(f.id)
        key = tuple(ids)
        ref = self.stack_ids.get(key)
        if ref is None:
            ref = self.stack_ids[key] = StackRef(len(self.stacks))
            self.stacks.append(key)
            self.kept_bytes += 120 + 8 * len(key)
        return ref


class Handler:
    """What :func:`read` calls as it goes (override what you need)."""

    def segment(self, seg: dict) -> None:
        """One item of ``segments``: a dict whose ``blocks`` is a list of dicts; frames are StackRefs."""

    def entry(self, device: int, e: dict) -> None:
        """One trace entry of device ``device``, in trace order."""

    def annotation(self, a: dict) -> None:
        """One item of ``external_annotations``."""

    def root_value(self, key: str, value) -> None:
        """A key of the root dict other than the sinks (``allocator_settings`` …), with its (small) value."""

    def progress(self, done_bytes: int) -> None:
        """Bytes read so far (called once per buffer refill)."""
