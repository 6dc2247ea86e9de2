"""The package's import graph, derived from the source: every ``import`` and ``from ... import``
statement of every module under the source folders (``setup.py``'s mapping: ``neonlite/``,
``backends/``, ``layers/``, ``kernels/``), at any depth (function-level imports included),
resolved to the ``neonlite.*`` module it names; ``importlib.import_module("literal", ...)``
calls; and the registries' tables: every string of a module-level statement (a table, a
registration call) that names a module of the package (``"neonlite.data.mnist"``,
``"neonlite.layers:GeneralizedCost"``, ``".cpu.backend"``), so a module loaded by name is an
edge like one imported.  A ``from package import name`` names the submodule ``package.name``
when that is a module, else ``package`` itself.  A package's ``__init__`` that Python runs on
the way to a submodule is not an edge: only the module a statement names is.  Used by
``tests/api/project/test_import_graph.py`` (no cycles; the function-level imports that stay,
each with its reason) and ``tests/api/project/test_architecture_map.py`` (the map's import
rules)."""
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


def _statement_targets(module, is_package, node, modules):
    """The package modules one ``import`` / ``from ... import`` statement of ``module`` names."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    target = (_resolve_relative(module, is_package, node.level, node.module)
              if node.level else node.module)
    found = set()
    for alias in node.names if target is not None else ():
        sub = f"{target}.{alias.name}"
        if sub in modules:
            found.add(sub)
        elif target in modules:
            found.add(target)
    return found


def imports_of(module, path, is_package, modules):
    """The modules of the package that ``module``'s import statements name (all depths), those
    it imports by ``importlib.import_module`` with a literal name, and those its module-level
    tables and calls name (:func:`_named_module`)."""
    found = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(_statement_targets(module, is_package, node, modules))
        elif _is_import_module_call(node):
            named = _named_module(module, is_package, node.args[0].value, modules)
            found.update([named] if named else [])
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr)) and id(node) not in docs:
            for leaf in ast.walk(node):
                if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str):
                    named = _named_module(module, is_package, leaf.value, modules)
                    found.update([named] if named else [])
    found.discard(module)
    return found


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


def _named_module(module, is_package, text, modules):
    """The package module a string names, or None: ``"neonlite.data.mnist"`` or
    ``"neonlite.layers:GeneralizedCost"`` (a module, or a module and a name in it, as a
    registry's table or an ``importlib.import_module`` call writes it), or ``".cpu.backend"``
    (relative to ``module``'s package)."""
    name = text.split(":", 1)[0]
    if not name.strip(".") or " " in name or "/" in name or name == "neonlite":
        return None
    if name.startswith("."):
        level = len(name) - len(name.lstrip("."))
        name = _resolve_relative(module, is_package, level, name.lstrip(".") or None)
    return name if name in modules else None


def _docstrings(tree):
    """``id``s of the module-level statements that are its docstring."""
    body = tree.body
    return {id(body[0])} if body and isinstance(body[0], ast.Expr) and \
        isinstance(body[0].value, ast.Constant) else set()


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


def function_level_imports():
    """``{(module, imported module)}``: the package modules each module imports inside a
    function body rather than at module level."""
    modules = source_modules()
    found = set()
    for name, (path, package) in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found.update((name, target) for target in
                                 _statement_targets(name, package, node, modules))
    return found
