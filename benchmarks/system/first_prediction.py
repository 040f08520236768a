"""RunInference's first prediction from a directory of 100,000 models: how long a worker that
has just started takes to predict with ``ModelDirectoryHandler``.

The directory: ``unitless train`` (NAG, logistic) over 100,000 rows, one per model key (the
checkpoints of 100,000 models in model groups, as a run writes them). Then, each in a process
of its own (a worker's start: Beam and unitless imported, nothing read), the three steps
RunInference takes before its first result, timed one after the other: the handler made (at
graph construction: ``check_model_dir`` lists the directory), ``load_model`` (in the worker's
setup) and ``run_inference`` of one record of a key not scored before (its model read then),
each process a different key. Target (issue #57): the first prediction within 1 s of the
worker's start. Beside it, once: ``load_models`` over the whole directory, what every setup
read before (``--no-old``: skipped).

    .venv/bin/python benchmarks/system/first_prediction.py            # 100,000 models, 5 workers
    .venv/bin/python benchmarks/system/first_prediction.py --quick    # 2,000 models, 3 workers

Writes benchmarks/results/first_prediction{.md,.json} (``--quick``: in results/tmp/).
"""
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (its common/)
from common.machine import header  # noqa: E402
from common.results import result_name, table, write_results  # noqa: E402
from common.runs import parse_args, progress, run_timed, scratch, unitless_command  # noqa: E402

WORKER = """
import json, sys, time
t = time.perf_counter()
from unitless.beam import ModelDirectoryHandler
imported = time.perf_counter() - t
model_dir, key = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
handler = ModelDirectoryHandler(model_dir, id_column="id")
t1 = time.perf_counter()
model = handler.load_model()
t2 = time.perf_counter()
(got_key, result), = handler.run_inference([(key, {"id": "q", "x1": 0.5, "x2": -2.0})], model)
t3 = time.perf_counter()
assert got_key == key and result.inference["refused"] is None, result
print(json.dumps({"key": key, "import_s": imported, "handler_s": t1 - t0, "setup_s": t2 - t1,
                  "first_prediction_s": t3 - t2, "total_s": t3 - t0,
                  "checkpoint": result.model_id}))
"""

OLD = """
import json, sys, time
from unitless.pipelines.score import load_models
t = time.perf_counter()
n = len(load_models(sys.argv[1]))
print(json.dumps({"models": n, "load_models_s": time.perf_counter() - t}))
"""


def write_input(path, models):
    lines = ["id,key,label,x1,x2"]
    lines += [f"r{i},k{i},{1 if i % 3 else -1},{(i % 17) / 7:.4f},{(i % 5) - 2}"
              for i in range(models)]
    path.write_text("\n".join(lines) + "\n")


def in_process_of_its_own(code, *args):
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    args = parse_args(__doc__, workdir=(str, None, "keep the model directory here"),
                      no_old=(bool, False, "skip load_models over the whole directory"))
    h = header()
    models, workers = (2_000, 3) if args.quick else (100_000, 5)
    with scratch(args.workdir, "first_prediction_") as work:
        model_dir = work / "models"
        if not model_dir.exists():
            write_input(work / "input.csv", models)
            progress(f"training {models:,} models")
            built = run_timed(unitless_command([
                "train", "--input", str(work / "input.csv"), "--id-column", "id",
                "--model-key-column", "key", "--algorithm", "nag", "--model-dir",
                str(model_dir), "--predictions", str(work / "pred"), "--dead-letter",
                str(work / "dead")]))
            progress(f"trained in {built['wall_s']:.0f} s")
        runs = []
        for n in range(workers):
            key = f"k{(n * 7919) % models}"
            runs.append(in_process_of_its_own(WORKER, model_dir, key))
            progress(f"worker {n + 1}: {runs[-1]['total_s']:.3f} s")
        old = None if args.no_old else in_process_of_its_own(OLD, model_dir)
    rows = [[r["key"], f"{r['import_s']:.2f}", f"{r['handler_s']:.3f}", f"{r['setup_s']:.4f}",
             f"{r['first_prediction_s']:.3f}", f"{r['total_s']:.3f}"] for r in runs]
    worst = max(r["total_s"] for r in runs)
    old_text = ("" if old is None else
                f"\nBefore, every setup read every model (`load_models`): "
                f"{old['load_models_s']:.1f} s for the {old['models']:,} models of this "
                "directory, once per worker and once more at graph construction.\n")
    body = f"""
{models:,} models (one key per model, model groups as `unitless train` writes them). Each
worker a process of its own; times in seconds from the worker's start (Beam and unitless
imported: the import is shown apart) to its first prediction, a key not scored before:

{table(["key", "import (apart)", "handler made", "load_model (setup)",
        "run_inference, first", "first prediction from the start"], rows)}

Slowest first prediction: {worst:.3f} s (target ≤ 1 s).
{old_text}"""
    write_results(result_name("first_prediction", args.quick),
                  f"RunInference: the first prediction from {models:,} models", h, body,
                  {"models": models, "workers": runs, "load_models": old})


if __name__ == "__main__":
    main()
