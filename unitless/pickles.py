"""Pickles that outlive the process that wrote them: Beam state, which a runner carries over to
an updated job (Dataflow's in-place update, a Flink savepoint), holds the waiting blocks, the
label join's log and the shards' rounds pickled, each class named by its module. ``loads``
reads those an earlier version wrote, whose classes have moved since (``MOVED``)."""
import importlib
import io
import pickle
from typing import Any

# a module of earlier versions -> the modules its classes are in now
MOVED = {
    "unitless.connectors.records": ("unitless.parse.records",),
    "unitless.connectors.sparse_text": ("unitless.parse.line_spans", "unitless.parse.sparse_text"),
    "unitless.connectors.formats": ("unitless.parse.spec",),
    "unitless.store.join": ("unitless.labels.join", "unitless.labels.waiting",
                            "unitless.labels.resume", "unitless.labels.closed"),
    "unitless.store.keyed_model": ("unitless.models.keyed_model", "unitless.models.model_group",
                                   "unitless.models.predictions"),
    "unitless.store.model_group": ("unitless.models.model_group",),
    "unitless.pipelines.sharded": ("unitless.pipelines.rounds",),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            for moved in MOVED.get(module, ()):
                found = getattr(importlib.import_module(moved), name, None)
                if found is not None:
                    return found
            raise


def loads(data: bytes | memoryview) -> Any:
    """``pickle.loads`` that also reads the classes of earlier versions' modules (``MOVED``):
    tried as it is first, so a pickle of this version (every one a run writes itself) costs
    nothing more to read; only one naming a module or class that is gone is read again."""
    try:
        return pickle.loads(data)
    except (ImportError, AttributeError):
        return _Unpickler(io.BytesIO(data)).load()
