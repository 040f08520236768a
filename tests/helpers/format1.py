"""A model directory's group checkpoints rewritten as the versions before part format 2 wrote
them (docs/compatibility.md): each part's models with their metadata as JSON in its header,
each sealed with a checksum of its own (``checkpoint_file.seal_many``, the per-key file's), and
manifests of format 1 naming those checksums. What a user upgrading finds in their model
directory."""
import glob
import json
import os

import pyarrow as pa

from unitless.learner.arrow_form import TableRows
from unitless.store import by_group
from unitless.store.checkpoint_file import CHECKSUM_FIELD, seal_many, table_to_bytes
from unitless.store.part_format import MODEL_KEY, PART_KEY


def as_format1(model_dir):
    """Rewrite every part and manifest under model_dir's group layout in format 1."""
    for group in glob.glob(os.path.join(model_dir, "groups", "*", "*")):
        checksums = {}  # (part name, index) -> its model's format-1 checksum
        for path in glob.glob(os.path.join(group, "part-*.arrow")):
            table = pa.ipc.open_file(pa.py_buffer(open(path, "rb").read())).read_all()
            header = json.loads(table.schema.metadata[PART_KEY])
            _, models = by_group._part_index(table.schema.metadata)
            body = table.drop_columns([MODEL_KEY]).replace_schema_metadata(None)
            sealed = seal_many([(meta[MODEL_KEY], TableRows(body, first, rows),
                                 {k: v for k, v in meta.items() if k != CHECKSUM_FIELD})
                                for first, rows, meta in models])
            index = [{"first_row": first, "rows": rows, "metadata": json.loads(stored)}
                     for (first, rows, _), (*_, stored) in zip(models, sealed)]
            checksums.update({(os.path.basename(path), n): meta[CHECKSUM_FIELD]
                              for n, (_, _, meta, _) in enumerate(sealed)})
            old = json.dumps({"group": header["group"], "seq": header["seq"], "models": index})
            with open(path, "wb") as f:
                f.write(table_to_bytes(table.replace_schema_metadata({PART_KEY: old.encode()})))
        for path in glob.glob(os.path.join(group, "manifest-*.json")):
            manifest = json.load(open(path))
            manifest["format"] = "unitless group manifest 1"
            for entry in manifest["models"].values():
                entry[3] = checksums[entry[0], entry[1]]
            with open(path, "w") as f:
                json.dump(manifest, f)
    by_group._parts.clear()
    by_group._indices.clear()
