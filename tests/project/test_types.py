"""The type annotations of unitless/ (issue #60: a type checker in the quick tier): every public
function and method is annotated, and mypy, as pyproject.toml's [tool.mypy] sets it, finds
nothing wrong with them."""
import ast
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
# classes whose methods Beam calls and reads the annotations of: a DoFn's, a PTransform's or a
# CombineFn's would become Beam's type hints, which choose coders and are checked as the graph is
# built, so they stay unannotated (their types are said where Beam takes them:
# ``with_output_types``); and the project's own subclasses of those, named as bases (a DoFn's:
# ReadPartition, which ReadPartitionForever extends; a PTransform's: WritePredictions)
BEAM_BASES = {"DoFn", "PTransform", "CombineFn", "ModelHandler", "InOrder", "ReadPartition",
              "WritePredictions"}
# module-level functions handed to Beam, which reads their annotations (as ``BEAM_BASES``')
BEAM_CALLABLES = {
    "unitless/pipelines/accounting:predictions_tally",  # handed to beam.Map
    "unitless/pipelines/accounting:sum_tallies",  # handed to beam.CombineGlobally
}


def _annotated(function, method):
    args = function.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs,
              *[a for a in (args.vararg, args.kwarg) if a is not None]]
    if method and params and params[0].arg in ("self", "cls") and not any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in function.decorator_list):
        params = params[1:]
    if any(p.annotation is None for p in params):
        return False
    return function.returns is not None or (function.name == "__init__" and bool(params))


def unannotated(root=REPO / "unitless"):
    """["module:function" or "module:Class.method"] of the public functions and methods (of
    public classes, but those Beam calls: ``BEAM_BASES``, ``BEAM_CALLABLES``) without
    annotations on every parameter and the return."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(REPO).with_suffix("").as_posix()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (not node.name.startswith("_") and not _annotated(node, False)
                        and f"{module}:{node.name}" not in BEAM_CALLABLES):
                    found.append(f"{module}:{node.name}")
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                         for b in node.bases}
                if bases & BEAM_BASES:
                    continue
                for item in node.body:
                    if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                            and (not item.name.startswith("_") or item.name == "__init__")
                            and not _annotated(item, True)):
                        found.append(f"{module}:{node.name}.{item.name}")
    return found


def test_every_public_function_and_method_is_annotated():
    missing = unannotated()
    assert missing == [], f"{len(missing)} without annotations, e.g. {missing[:20]}"


def test_mypy_finds_nothing_in_unitless():
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


if __name__ == "__main__":  # (what is left, package by package)
    for line in unannotated():
        print(line)
