"""The decoded models a worker keeps in memory between a key's elements."""
from collections import OrderedDict
from typing import Any, Dict, Hashable, Tuple


class DecodedModels:
    """The decoded models a worker keeps between a key's elements (the rest stay encoded in
    Beam state), least recently used first: at most ``count`` of them, holding at most ``mib``
    MiB of learner state together (sizes as of each key's last use); the key in use is always
    kept. A key's entry may hold several models (a ``ModelGroup``)."""
    models: OrderedDict[Hashable, Any]
    sizes: Dict[Hashable, Tuple[int, int]]

    def __init__(self, count: int, mib: int) -> None:
        self.count, self.limit = count, mib << 20
        self.models, self.sizes = OrderedDict(), {}  # key -> (bytes, models) as of its last use
        self.held = self.decoded = 0  # bytes and models of them all

    def get(self, key: Hashable) -> Any:
        return self.models.get(key)

    def pop(self, key: Hashable) -> Any:
        """The key's model (or group), no longer kept (None if it is not)."""
        nbytes, models = self.sizes.pop(key, (0, 0))
        self.held, self.decoded = self.held - nbytes, self.decoded - models
        return self.models.pop(key, None)

    def keep(self, key: Hashable, model: Any, nbytes: int, models: int = 1) -> None:
        """Keep the key's model (most recently used), of ``nbytes`` (and holding ``models``
        decoded models); drop the least recently used others past the count or the bytes."""
        self.pop(key)
        self.sizes[key] = nbytes, models
        self.held, self.decoded = self.held + nbytes, self.decoded + models
        self.models[key] = model
        while len(self.models) > 1 and (self.decoded > self.count or self.held > self.limit):
            self.pop(next(iter(self.models)))
