"""Nothing outside ``backends/`` reaches past the backend contract.

Layers, optimizers, the profiler, the finiteness guard and the rest of ``neonlite`` talk to a
backend through its methods and to a tensor through ``backends.backend.Tensor``'s public
interface only.  Read from the source (every module of the source folders outside
``neonlite.backends``, function-level code included), so a new leak fails here as soon as it
is written:

* no import of a backend's concrete classes (the modules ``backends/cpu/backend.py``,
  ``tensor.py``, ``arena.py`` and their GPU twins, or the names ``CPUBackend``, ``GPUBackend``,
  ``CPUTensor``, ``GPUTensor``, ``aligned_empty``), so no ``isinstance`` test on them;
* no backend class named in a string (``type(be).__name__ == "CPUBackend"``);
* no read or write of a tensor's or backend's private fields (``t._ary``, ``t.ptr``,
  ``t.base``, ``getattr(t, "_ary")``, ``vars(be).get("_scratch")``, ...) on anything but the
  module's own ``self``.
"""
import ast

from support.import_graph import ROOT, import_graph, source_modules

CONCRETE_MODULES = {f"neonlite.backends.{side}.{name}" for side in ("cpu", "gpu")
                    for name in ("backend", "tensor", "arena")}
CONCRETE_NAMES = {"CPUBackend", "GPUBackend", "CPUTensor", "GPUTensor", "aligned_empty"}
#: the fields behind the contract: a CPU tensor's array, a GPU tensor's device address and
#: owner, either's private shape and type, a backend's scratch and kernel modules
PRIVATE_FIELDS = {"_ary", "ptr", "base", "_dtype", "_shape", "_views", "_scratch",
                  "_gemm_scratch", "_row_scratch", "_usable", "_kernels"}


def _outside_modules():
    return {name: path for name, (path, _) in source_modules().items()
            if not name.startswith("neonlite.backends")}


def _is_self(node):
    return isinstance(node, ast.Name) and node.id == "self"


def _docstrings(tree):
    """The string constants that are docstrings (module, class, function)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def leaks_in(path):
    """``["line N: what"]`` for every reach past the contract in the module at ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_FIELDS and \
                not _is_self(node.value):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                id(node) not in docs and node.value in PRIVATE_FIELDS | CONCRETE_NAMES:
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in CONCRETE_NAMES:
                    found.append(f"line {node.lineno}: imports {alias.name}")
    return found


def test_the_scan_finds_each_kind_of_leak(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""ptr in a docstring is fine."""\n'
                      "from neonlite.backends.cpu.tensor import CPUTensor\n"
                      "def f(t, be):\n"
                      "    self = None\n"
                      "    a = t._ary\n"
                      "    t.ptr, t.base = 1, 2\n"
                      "    b = getattr(t, '_ary', None)\n"
                      "    c = vars(be).get('_scratch')\n"
                      "    return type(be).__name__ == 'CPUBackend'\n"
                      "class K:\n"
                      "    def g(self):\n"
                      "        return self.base\n")
    assert sorted(leaks_in(sample)) == sorted([
        "line 2: imports CPUTensor", "line 5: ._ary", "line 6: .ptr", "line 6: .base",
        "line 7: '_ary'", "line 8: '_scratch'", "line 9: 'CPUBackend'"])


def test_no_module_outside_backends_imports_a_backend_class():
    outside = _outside_modules()
    wrong = sorted(f"{module} imports {target}" for module, imported in import_graph().items()
                   if module in outside for target in imported if target in CONCRETE_MODULES)
    assert not wrong, "modules outside backends/ that import a backend's concrete classes " \
                      "(ask the backend instead):\n" + "\n".join(wrong)


def test_no_module_outside_backends_touches_private_fields():
    wrong = [f"{path.relative_to(ROOT)} {leak}" for _, path in sorted(_outside_modules().items())
             for leak in leaks_in(path)]
    assert not wrong, "modules outside backends/ that reach past the backend contract:\n" + \
        "\n".join(wrong)
