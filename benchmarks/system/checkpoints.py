"""Checkpoints by model group against the per-key layout: write time and bytes per model,
object-store requests per checkpoint, and a resumed run over many keys with nothing new.

* Writing: K models (NAG, logistic, each having learned 20 examples of the slides' artificial
  stream, 21 features and a bias) checkpointed at once, K = 64, 1,000, 10,000: the per-key
  layout's writer (``per_key.write_checkpoints``, a file and a pointer per key) and the group
  layout's (``group_writer.GroupWriter``, 1,024 groups), alternated, each into a fresh local
  directory; beside them the models' tables alone (``KeyedModel.to_table``), which both pay.
* Requests: the same writes to MinIO (deploy/s3/local_s3.py, its Prometheus counters
  ``minio_s3_requests_total``, read once they have settled), 128 models in 8 groups, two
  checkpoints in a row (all models changed; keep 1, so the second prunes). Beam's S3 file
  system uploads each file as a multipart upload (three requests).
* Resume: ``unitless train`` over N rows keyed round-robin over 10,000 keys, then the same
  input with ``--resume`` and nothing new to learn, against a fresh single-key run over the same
  input, alternated. Target (issue #61): within 2× the single-key run (issue #35 asked 1.5×).

    UNITLESS_MINIO=... .venv/bin/python benchmarks/system/checkpoints.py
    .venv/bin/python benchmarks/system/checkpoints.py --quick

Writes benchmarks/results/checkpoints{.md,.json} (``--quick``: results/tmp/).
"""
import os
import re
import shutil
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # (deploy/)
from common.data import artificial_stream, write_csv  # noqa: E402
from common.machine import header  # noqa: E402
from common.results import table, write_results  # noqa: E402
from common.runs import parse_args, progress, run_timed, scratch, unitless_command  # noqa: E402
from pipeline import ours_command  # noqa: E402

from unitless.learner import dense_batch, learn, new_state  # noqa: E402
from unitless.store.group_writer import GroupWriter, taken  # noqa: E402
from unitless.store.groups import group_key  # noqa: E402
from unitless.models.keyed_model import KeyedModel  # noqa: E402
from unitless.store.per_key import write_checkpoints  # noqa: E402

GROUPS = 1024
PARTS = ("writes", "requests", "resume")
RESUME_KEYS = 10_000


def trained_models(k, seed):
    X, y, _ = artificial_stream(20 * k, seed)
    models = []
    for i in range(k):
        state = new_state("nag", 1 << 18, "logistic", bias_index=21, learning_rate=0.5)
        learn(state, dense_batch(X[20 * i:20 * (i + 1)], y[20 * i:20 * (i + 1)]))
        models.append(KeyedModel(f"customer-{i}", state))
    return models


def write_per_key(model_dir, models, keep=3):
    write_checkpoints(model_dir, [(m.key, m.to_table(), m.state.examples_seen) for m in models],
                      keep)


def write_by_group(model_dir, models, writer=None):
    writer = writer or GroupWriter(model_dir, GROUPS)
    groups = {}
    for m in models:
        groups.setdefault(group_key(m.key, writer.groups), []).append(taken(m.key, m.to_table()))
    writer.write(groups)
    return writer


def tables_only(_, models):
    for m in models:
        m.to_table()


def disk_bytes(root):
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())


def files_in(root):
    return sum(1 for p in Path(root).rglob("*") if p.is_file())


def measure_writes(work, counts, repeat, seed):
    out = {}
    for k in counts:
        models = trained_models(k, seed)
        rows = {"per-key": [], "by group": [], "tables only": []}
        sizes = {}
        for rep in range(repeat):
            for name, write in (("per-key", write_per_key), ("by group", write_by_group),
                                ("tables only", tables_only)):
                target = work / f"w{k}_{rep}_{name.replace(' ', '_')}"
                shutil.rmtree(target, ignore_errors=True)
                t = time.perf_counter()
                write(str(target), models)
                rows[name].append((time.perf_counter() - t) / k * 1e6)
                if name != "tables only":
                    sizes[name] = (disk_bytes(target) / k, files_in(target))
                shutil.rmtree(target, ignore_errors=True)
        out[k] = {"us_per_model": rows, "bytes_per_model": {n: s[0] for n, s in sizes.items()},
                  "files": {n: s[1] for n, s in sizes.items()}}
        progress(f"write {k:,} models: " + ", ".join(
            f"{n} {min(v):.0f}-{max(v):.0f} µs/model" for n, v in rows.items()))
    return out


def s3_requests(endpoint):
    """{api: requests} from MinIO's Prometheus counters (public: MINIO_PROMETHEUS_AUTH_TYPE),
    once they have settled (MinIO refreshes them every few seconds)."""
    last, stable = None, 0
    while stable < 3:
        with urllib.request.urlopen(f"{endpoint}/minio/v2/metrics/cluster", timeout=10) as r:
            text = r.read().decode()
        found = {}
        for api, value in re.findall(r'^minio_s3_requests_total\{api="([a-z0-9]+)"[^}]*\} (\S+)$',
                                     text, re.M):
            found[api] = found.get(api, 0) + int(float(value))
        stable = stable + 1 if found == last else 0
        last = found
        time.sleep(2)
    return found


def measure_requests(work, k, groups, seed, checkpoints=2):
    from deploy.s3.local_s3 import LocalS3
    os.environ["MINIO_PROMETHEUS_AUTH_TYPE"] = "public"
    models = trained_models(k, seed)
    out = {}
    with LocalS3(work / "minio") as s3:
        os.environ.update(s3.environment())
        s3.create_bucket("bench")
        for name in ("per-key", "by group"):
            per_checkpoint, writer = [], None
            for c in range(checkpoints):
                for m in models:
                    m.state.examples_seen += 1  # (every model changed)
                before = s3_requests(s3.endpoint)
                root = f"s3://bench/{name.replace(' ', '_')}"
                if name == "per-key":
                    write_per_key(root, models, keep=1)
                else:
                    writer = write_by_group(root, models, writer or GroupWriter(root, groups, 1))
                after = s3_requests(s3.endpoint)
                per_checkpoint.append({api: after.get(api, 0) - before.get(api, 0)
                                       for api in after if after.get(api, 0) != before.get(api, 0)})
            out[name] = per_checkpoint
            progress(f"requests, {k:,} models, {name}: "
                     f"{[sum(c.values()) for c in per_checkpoint]} per checkpoint")
    return out


def measure_resume(work, n, repeat, seed):
    X, y, _ = artificial_stream(n, seed)
    keys = np.char.add("k", (np.arange(n) % RESUME_KEYS).astype(str))
    csv = write_csv(work / "resume.csv", X, y.astype(np.int64), keys=keys)
    keyed = work / "keyed"
    run_timed(unitless_command(ours_command(csv, keyed, keyed=True)))
    rows = {"single key, fresh": [], f"{RESUME_KEYS:,} keys, --resume": []}
    for _ in range(repeat):
        shutil.rmtree(work / "single", ignore_errors=True)
        r = run_timed(unitless_command(ours_command(csv, work / "single",
                                                    extra=["--ignore-columns", "key"])))
        rows["single key, fresh"].append(r["wall_s"])
        r = run_timed(unitless_command(ours_command(csv, keyed, keyed=True, extra=["--resume"])))
        if "this run: 0 examples learned" not in r["stdout"]:
            raise RuntimeError(f"--resume learned something:\n{r['stdout'][-1500:]}")
        rows[f"{RESUME_KEYS:,} keys, --resume"].append(r["wall_s"])
        progress("resume: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in rows.items()))
    return {"rows": n, "wall_s": rows}


def render(data):
    lines = []
    if data.get("writes"):
        lines += ["## Writing a checkpoint of K changed models (µs per model; min-max over "
                  f"{data['repeat']} alternated repetitions)", ""]
        lines.append(table(
            ["K", "per-key layout", "by group", "tables only (both pay)",
             "bytes/model per-key", "by group", "files per-key", "by group"],
            [[f"{k:,}", *(f"{min(v):.0f}-{max(v):.0f}" for v in r["us_per_model"].values()),
              *(f"{r['bytes_per_model'][n]:,.0f}" for n in ("per-key", "by group")),
              *(f"{r['files'][n]:,}" for n in ("per-key", "by group"))]
             for k, r in data["writes"].items()]))
    if data.get("requests"):
        k, g = data["requests_models"], data["requests_groups"]
        lines += ["", f"## Object-store requests per checkpoint, {k:,} changed models in {g} "
                      "groups, MinIO (two checkpoints; the second prunes)", ""]
        lines.append(table(["layout", "checkpoint 1", "checkpoint 2", "by API (2nd)"],
                           [[name, *(f"{sum(c.values()):,}" for c in cs),
                             ", ".join(f"{a} {v}" for a, v in sorted(cs[-1].items()))]
                            for name, cs in data["requests"].items()]))
    resume = data.get("resume")
    if not resume:
        return "\n".join(lines)
    lines += ["", f"## --resume over {RESUME_KEYS:,} keys with nothing new, "
                  f"{resume['rows']:,} rows (wall s, alternated)", ""]
    single = resume["wall_s"]["single key, fresh"]
    resumed = resume["wall_s"][f"{RESUME_KEYS:,} keys, --resume"]
    ratios = [r / s for r, s in zip(resumed, single)]
    lines.append(table(["run", "wall s"], [[k, ", ".join(f"{x:.1f}" for x in v)]
                                           for k, v in resume["wall_s"].items()]))
    lines += ["", f"Resumed / single key, per repetition: {min(ratios):.2f}-{max(ratios):.2f}× "
                  "(target ≤ 2×, issue #61)."]
    return "\n".join(lines)


def main():
    args = parse_args(__doc__, repeat=(int, 3), rows=(int, 200_000), seed=(int, 7),
                      workdir=(str, None), parts=(str, ",".join(PARTS), "which parts to run"))
    counts = (64, 1_000) if args.quick else (64, 1_000, 10_000)
    rows = 20_000 if args.quick else args.rows
    parts = args.parts.split(",")
    h = header()
    with scratch(args.workdir, "unitless-ckpt-") as work:
        data = {"repeat": args.repeat}
        if "writes" in parts:
            data["writes"] = measure_writes(work, counts, args.repeat, args.seed)
        if "requests" in parts and os.environ.get("UNITLESS_MINIO"):
            data["requests_models"], data["requests_groups"] = 128, 8
            data["requests"] = measure_requests(work, 128, 8, args.seed)
        if "resume" in parts:
            data["resume"] = measure_resume(work, rows, 1 if args.quick else 2, args.seed)
    name = "checkpoints" if sorted(parts) == sorted(PARTS) else "checkpoints_" + "_".join(parts)
    write_results(name + ("_quick" if args.quick else ""), "Checkpoints by model group", h,
                  render(data), data)


if __name__ == "__main__":
    main()
