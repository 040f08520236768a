"""The layering docs/design.md describes, checked on the source: each package of unitless
imports only from the layers below its own, and no module imports itself back through others
(a cycle makes import order matter and hides which module a job belongs to)."""
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "unitless"
# lowest first; a package (or top-level module) imports from its own layer and those below
LAYERS = [{"learner", "schemas", "data", "pickles"}, {"parse"}, {"connectors"}, {"labels"},
          {"models"}, {"store"}, {"runtime", "reports"}, {"pipelines"},
          {"beam", "cli", "compile", "flink", "runners", "__init__"}]


def imports(typing=True):
    """{module: the unitless modules it imports, at its top or inside a function}; with
    ``typing`` False, not those imported only for annotations (``if TYPE_CHECKING:``), which
    are never imported when the code runs, so they make no cycle."""
    modules = {".".join(f.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(
        ".__init__"): f for f in ROOT.rglob("*.py")}
    graph = {}
    for name, f in modules.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(f.read_text())
        for_typing = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                      and getattr(block.test, "id", getattr(block.test, "attr", None))
                      == "TYPE_CHECKING" for statement in block.body for n in ast.walk(statement)}
        found = set()
        for node in ast.walk(tree):
            if not typing and id(node) in for_typing:
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = (".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                 + ([node.module] if node.module else []))
                        if node.level else node.module or "")
                for a in node.names:  # (``from .pkg import module`` or a name in a module)
                    found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
        graph[name] = {m for m in found if m in modules} - {name}
    return graph


def layer(module):
    part = module.split(".")[1] if "." in module else "__init__"
    return next(i for i, names in enumerate(LAYERS) if part in names)


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_each_package_imports_only_from_the_layers_below_it_and_no_module_imports_itself_back():
    graph = imports()
    assert len(graph) > 50 and "unitless.pipelines.learn" in graph["unitless.cli.main"]
    upward = sorted((m, d) for m, ds in graph.items() for d in ds if layer(d) > layer(m))
    assert upward == []
    assert cycles(imports(typing=False)) == []


def test_the_checks_find_an_upward_import_and_a_cycle():
    graph = {"unitless.store.a": {"unitless.pipelines.b"}, "unitless.pipelines.b":
             {"unitless.store.a"}, "unitless.learner.c": set()}
    assert [(m, d) for m, ds in graph.items() for d in ds if layer(d) > layer(m)] == [
        ("unitless.store.a", "unitless.pipelines.b")]
    assert cycles(graph) == [["unitless.pipelines.b", "unitless.store.a"]]
