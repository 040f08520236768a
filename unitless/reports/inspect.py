"""`unitless inspect`: what a checkpoint holds, and its most influential features."""
from typing import Any

import numpy as np

from ..learner import from_arrow, read_metadata
from ..store.catalog import load_checkpoint


def summary(path: str, top: int = 20) -> dict[str, Any]:
    """What the checkpoint at ``path`` holds: a checkpoint file, which must be valid, or a model
    key's directory, whose newest valid checkpoint is summarised (``file`` names it)."""
    file, table = load_checkpoint(path)
    meta = read_metadata(table)
    state = from_arrow(table)
    spec = state.spec
    cls = table.column("class").to_numpy()
    idx = table.column("index").to_numpy()
    names = table.column("name").to_pylist()
    w = table.column("w").to_numpy()
    if spec.scale:
        scale = np.abs(table.column(spec.scale).to_numpy())
        basis = f"|w × {spec.scale}| (the feature's scale as the learner sees it)"
    else:
        scale = np.ones_like(w)
        basis = "|w| (this learner keeps no feature scale)"
    influence = np.abs(w * scale)
    order = np.argsort(-influence, kind="stable")[:top]
    return {
        "path": path, "file": file,
        "algorithm": meta["algorithm"], "reference": spec.reference, "loss": meta["loss"],
        "hyperparameters": meta["hyperparameters"], "model_key": meta.get("model_key"),
        "classes": meta["n_classes"], "dimension": meta["dim"],
        "examples_seen": meta["examples_seen"], "progressive_loss": meta["progressive_loss"],
        "examples_served": meta.get("examples_served", 0),
        "active_features": int(len(set(idx.tolist()))),
        "input_positions": meta.get("input_positions"), "time": meta.get("time"),
        "schema_version": meta["schema_version"], "ranked_by": basis,
        "top_features": [{"class": int(cls[r]), "index": int(idx[r]), "name": names[r],
                          "weight": float(w[r]), "scale": float(scale[r]),
                          "influence": float(influence[r])} for r in order],
    }


def render(info: dict[str, Any]) -> str:
    lines = [f"{info['path']}",
             f"  algorithm   {info['algorithm']} ({info['reference']}), loss {info['loss']}",
             f"  hyperparams {info['hyperparameters']}",
             f"  model key   {info['model_key']!r}; classes {info['classes']}; "
             f"dimension {info['dimension']}; active features {info['active_features']}",
             f"  examples    {info['examples_seen']} learned, {info['examples_served']} served; "
             f"progressive loss {info['progressive_loss']:.6f}",
             f"  positions   {info['input_positions']}",
             f"  top features by {info['ranked_by']}:"]
    for f in info["top_features"]:
        lines.append(f"    {f['name'] or '#' + str(f['index']):<24} class {f['class']:<3} "
                     f"w={f['weight']:+.6g}  scale={f['scale']:.6g}  influence={f['influence']:.6g}")
    return "\n".join(lines)
