"""The package's import graph, derived from the source: every ``import`` and ``from ... import``
statement of every module under the source folders (``setup.py``'s mapping: ``neonlite/``,
``backends/``, ``layers/``, ``kernels/``), at any depth (function-level imports included),
resolved to the ``neonlite.*`` module it names, and ``importlib.import_module("literal", ...)``
calls.  A ``from package import name`` names the submodule ``package.name`` when that is a
module, else ``package`` itself.  A package's ``__init__`` that Python runs on the way to a
submodule is not an edge: only the module a statement names is.  Used by
``tests/api/test_import_graph.py`` (no cycles) and ``tests/api/test_architecture_map.py`` (the
map's import rules)."""
import ast
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "setup.py").is_file())
# import name -> source folder (setup.py's SOURCE_FOLDERS)
SOURCE_FOLDERS = {"neonlite": "neonlite", "neonlite.backends": "backends",
                  "neonlite.layers": "layers", "neonlite.kernels": "kernels"}


def source_modules():
    """{dotted module name: (path, is_package)} for every ``.py`` file of the source folders."""
    modules = {}
    for name, folder in SOURCE_FOLDERS.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("").parts
            if "__pycache__" in rel:
                continue
            package = rel[-1] == "__init__"
            parts = rel[:-1] if package else rel
            modules[".".join((name, *parts))] = (path, package)
    return modules


def _resolve_relative(module, is_package, level, target):
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _is_import_module_call(node):
    """``importlib.import_module("literal", ...)`` or ``import_module("literal", ...)``."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    named = (func.attr if isinstance(func, ast.Attribute) else
             func.id if isinstance(func, ast.Name) else None)
    first = node.args[0]
    return (named == "import_module" and isinstance(first, ast.Constant)
            and isinstance(first.value, str))


def imports_of(module, path, is_package, modules):
    """The modules of the package that ``module``'s import statements name (all depths), and
    those it imports by ``importlib.import_module`` with a literal name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            target = (_resolve_relative(module, is_package, node.level, node.module)
                      if node.level else node.module)
            if target is None:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    found.add(sub)
                elif target in modules:
                    found.add(target)
        elif _is_import_module_call(node):
            name = node.args[0].value
            if name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                name = _resolve_relative(module, is_package, level, name.lstrip(".") or None)
            if name in modules:
                found.add(name)
    found.discard(module)
    return found


def import_graph():
    modules = source_modules()
    return {name: imports_of(name, path, package, modules)
            for name, (path, package) in modules.items()}


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def describe(component, graph):
    members = set(component)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in component)
