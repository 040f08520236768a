"""What ``ordering.InOrder`` asks of its handler, which makes something of each key's blocks once
they are handed to it in input order: the learning step (``train.LearnBlocks``) and the shard
sequencer (``rounds.CutRounds``). ``OrderHandler`` is what every handler has;
``ArrivingHandler`` (with ``learns_on_arrival``), ``IdleHandler``, ``ExpiringHandler`` and
``ReleasingHandler`` are what one may have besides, and Beam's ``setup``, ``teardown``,
``start_bundle`` and ``finish_bundle``, which ``InOrder`` calls with its own when the handler
has them."""
from typing import Any, Iterable, Iterator, List, Optional, Protocol, Tuple, runtime_checkable


@runtime_checkable
class OrderHandler(Protocol):
    # whether a block that continues the key's state may skip the wait (``continues``)
    learns_on_arrival: bool

    def state(self, key: str, stored: Any) -> Any:
        """The key's state, from Beam state (``stored``: an ``ordering.Stored``)."""

    def store(self, key: str, state: Any, stored: Any) -> None:
        """The key's state, into Beam state."""

    def enter_source(self, key: str, block: Any, stored: Any) -> None:
        """What to do with a Kafka partition's block as it arrives, before it waits."""

    def learn(self, state: Any, block: Any, at: Optional[int] = None) -> Iterable:
        """A block handed on at ``at`` (µs on the watermark's clock; None: at the end of the
        input); yields outputs."""

    def watermark_passed(self, state: Any, past: List, at: List) -> List:
        """The watermark is past the waiting entries ``past``; returns those of ``at`` (learned
        at the watermark's own time) that need a mark (``LearnBlocks.watermark_passed``)."""

    def released(self, key: str, state: Any) -> Iterable:
        """What follows a release's learning, before the state is stored; yields outputs."""

    def input_ended(self, key: str, state: Any, stored: Any) -> Iterable:
        """The end of the input, once everything waiting is handed on; yields outputs."""


@runtime_checkable
class ArrivingHandler(Protocol):
    def continues(self, state: Any, block: Any) -> bool:
        """With ``learns_on_arrival``: whether the block holds the state's next examples (then
        it is learned as it arrives, without waiting for the watermark)."""


@runtime_checkable
class ReleasingHandler(Protocol):
    def learn_released(self, state: Any, blocks: Iterator, at: Optional[int] = None) -> Iterable:
        """The blocks the watermark released, in order, instead of ``learn`` for each."""


@runtime_checkable
class IdleHandler(Protocol):
    # once the watermark is this far past the key's last block of a source (None: never),
    # ``idle`` is called: an event-time timer, so it fires once a stream has been quiet so long
    idle_seconds: Optional[float]

    def idle(self, key: str, state: Any) -> Tuple[bool, Optional[float]]:
        """Whether it changed the state (which is then stored), and in how many seconds of the
        watermark to call it again if no block comes (None: not)."""


@runtime_checkable
class ExpiringHandler(Protocol):
    # a timer set at a source's block's stamp plus this (when none is set) calls ``expire``
    ttl_seconds: Optional[float]

    def expire(self, key: str, state: Any, now: int, held: set) -> Iterator:
        """Once the watermark passes the timer (``now``: its time; ``held``: the model keys of
        the blocks still waiting): yields outputs, and returns when the timer is due again
        (µs; None: not before a source's next block)."""
