"""The checkpoints the learning step has taken and not yet written, with what they hold in
memory until they are: the step writes them together before its bundle ends, or sooner once
they grow large (docs/design.md, "Delivery and checkpoints")."""
from typing import Any, List, Mapping


class TakenCheckpoints:
    """``entries``: (model key, its rows of a table, metadata, progressive loss, partitions
    newly passed) of each checkpoint taken."""
    MAX_BYTES = 1 << 30  # checkpoints taken before they are written anyway
    # what a checkpoint taken costs in memory beside its table's bytes, about, until written:
    # its metadata, its rows' objects, then its sealed JSON and its share of the part
    # (a run's last checkpoints, of all of its models, are taken together)
    CHECKPOINT_BYTES = 8 << 10
    # --labels: what a checkpoint's share of its group's join costs per id it names (closed,
    # or a position still waiting), as Python objects until sealed: a bounded input's join
    # closes every id at its end, millions of them, so its checkpoints are written once their
    # shares reach ``MAX_JOIN_BYTES``, not with the bundle
    JOIN_ENTRY_BYTES = 200
    MAX_JOIN_BYTES = 64 << 20
    entries: List[tuple]

    def __init__(self) -> None:
        self.clear()

    def __len__(self):
        return len(self.entries)

    def clear(self) -> None:
        self.entries, self.nbytes, self.join_bytes = [], 0, 0

    def add(self, taken: List[tuple]) -> bool:
        """Add ``taken``, entries of checkpoints taken together; returns whether what is taken
        has grown large enough to be written now."""
        self.entries += taken
        # (a table's bytes once: its models' rows are slices of it, and it is held whole)
        tables = {id(rows.table): rows.table for _, rows, *_ in taken}.values()
        self.nbytes += sum(table.nbytes for table in tables) + self.CHECKPOINT_BYTES * len(taken)
        self.join_bytes += self.JOIN_ENTRY_BYTES * sum(
            join_entries(meta["label_join"]) for _, _, meta, *_ in taken if "label_join" in meta)
        return self.nbytes >= self.MAX_BYTES or self.join_bytes >= self.MAX_JOIN_BYTES


def join_entries(saved: Mapping[str, Any]) -> int:
    """How many ids and positions a checkpoint's share of its join names
    (``LabelJoin.resume_state``)."""
    closed = saved["closed"]
    return (len(closed["ids"]) if closed else 0) + sum(map(len, saved["waiting"].values()))
