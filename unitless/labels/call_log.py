"""What persists an object that changes call by call (a model group's labels join) in Beam state,
without writing it whole on every change: the calls since its last snapshot, numbered, each a
value of a bag, replayed onto the snapshot to rebuild it; once they outgrow the snapshot, a
new snapshot, written in parts so that no value written is 1 MiB or more."""
import itertools
import pickle
from typing import Any, Iterable, Optional

from .. import pickles

# begins each part of a snapshot, before the part's index (4 bytes, big-endian so that the parts
# sort in order); a call's pickle never begins with it
_SNAPSHOT_PART = b"\x00S"


class CallLog:
    """The log of one object (its ``owner``, which holds it as ``log``): ``record`` each call
    that changes it, ``entries`` to persist, ``rebuild`` from what was persisted."""
    SNAPSHOT_AFTER = 4 << 20  # bytes logged (beyond twice the last snapshot's) before the next
    # bytes of a snapshot's part: each is a value of its own in Beam state, whose values stay
    # under 1 MiB (a call logged larger is replaced by a snapshot)
    SNAPSHOT_PART = (1 << 20) - 64
    calls: list[bytes]
    snapshot_bytes: Optional[int]

    def __init__(self) -> None:
        # the calls since the last ``entries``, numbered; the bytes of the last snapshot (None:
        # none yet) and of the calls since it
        self.calls, self.logged, self.snapshot_bytes, self.call_bytes = [], 0, None, 0
        self.replaying = False

    def __getstate__(self):  # (a snapshot holds its owner, not the calls persisted apart)
        return {k: v for k, v in self.__dict__.items() if k != "calls"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.calls = []

    def record(self, call: str, args: tuple) -> None:
        """Log a call (the owner's method ``call`` with ``args``) that changed the owner."""
        if self.replaying:
            return
        data = pickle.dumps((call, args), protocol=pickle.HIGHEST_PROTOCOL)
        self.logged += 1
        self.calls.append(self.logged.to_bytes(8, "little") + data)
        self.call_bytes += len(data)
        if len(data) > self.SNAPSHOT_PART:
            self.snapshot_bytes = None  # (the next ``entries`` snapshots, in parts)

    def entries(self, owner: object) -> tuple[bool, list[bytes]]:
        """(whether to clear the persisted log first, entries to add to it): the calls logged
        since the last call, or, once they outgrow the last snapshot (a served example is
        logged once, not written again with every change), a snapshot of the whole ``owner``."""
        if self.snapshot_bytes is None or (self.call_bytes
                                           > self.SNAPSHOT_AFTER + 2 * self.snapshot_bytes):
            data = pickle.dumps(("snapshot", owner), protocol=pickle.HIGHEST_PROTOCOL)
            self.calls, self.snapshot_bytes, self.call_bytes = [], len(data), 0
            number, step = self.logged.to_bytes(8, "little"), self.SNAPSHOT_PART
            return True, [number + _SNAPSHOT_PART + part.to_bytes(4, "big") + data[at:at + step]
                          for part, at in enumerate(range(0, len(data), step))]
        entries, self.calls = self.calls, []
        return False, entries

    @staticmethod
    def rebuild(entries: Iterable[bytes]) -> Any:
        """The owner that ``entries`` persisted (in any order): its last snapshot, then the
        calls logged since, replayed; None for none."""
        owner: Any
        owner, logged = None, 0
        ordered = sorted((int.from_bytes(e[:8], "little"), e[8:]) for e in entries)
        for number, same in itertools.groupby(ordered, key=lambda entry: entry[0]):
            datas = [data for _, data in same]  # (a snapshot's parts, or one call)
            data = b"".join(part[len(_SNAPSHOT_PART) + 4:] for part in datas
                            ) if datas[0].startswith(_SNAPSHOT_PART) else datas[0]
            call, args = pickles.loads(data)
            if call == "snapshot":
                owner, logged = args, 0
                owner.log.replaying, owner.log.snapshot_bytes = True, len(data)
            else:
                getattr(owner, call)(*args)
                logged += len(data)
            owner.log.logged = number  # (the calls it logs next are numbered after these)
        if owner is not None:
            owner.log.call_bytes, owner.log.replaying = logged, False
        return owner

    @property
    def nbytes(self) -> int:
        """Bytes persisted: about what its owner holds, without walking it."""
        return (self.snapshot_bytes or 0) + self.call_bytes


class Logged:
    """An object that persists as its ``CallLog`` (``log``), each change a call it records."""
    log: CallLog

    def log_entries(self) -> tuple[bool, list[bytes]]:
        """(whether to clear the persisted log first, entries to add to it): ``CallLog``."""
        return self.log.entries(self)

    @staticmethod
    def rebuild(entries: Iterable[bytes]) -> Any:
        """What ``log_entries`` persisted (None for none): its calls replayed, whose results
        were used when they were made."""
        return CallLog.rebuild(entries)
