"""The house's sizes (issue #60): no module of unitless/ over 450 lines, no function over 60 but
the compiled kernels (numba's ``njit``, whose loops are written out for the compiler)."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "unitless"
MODULE_LINES, FUNCTION_LINES = 450, 60


def _compiled(function):
    return any("jit" in ast.unparse(d) for d in function.decorator_list)


def test_no_module_over_450_lines_and_no_function_over_60_but_compiled_kernels():
    long_modules, long_functions = [], []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MODULE_LINES:
            long_modules.append(str(path.relative_to(ROOT)))
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.end_lineno - node.lineno + 1 > FUNCTION_LINES
                    and not _compiled(node)):
                long_functions.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert long_modules == [] and long_functions == []
