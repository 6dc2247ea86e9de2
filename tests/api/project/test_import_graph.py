"""The package has no import cycles, and every module imports first, alone.

The graph comes from the source: every ``import`` and ``from ... import`` statement of every
module under the source folders (``setup.py``'s mapping: ``neonlite/``, ``backends/``,
``layers/``, ``kernels/``), at any depth (function-level imports included), resolved to the
``neonlite.*`` module it names.  A ``from package import name`` names the submodule
``package.name`` when that is a module, else ``package`` itself.  A package's ``__init__`` that
Python runs on the way to a submodule is not an edge: only the module a statement names is.  So
the test cannot go stale: a new module or import is in the graph as soon as it is written.
``importlib.import_module("literal", __package__)`` calls count as imports too.
"""
import os
import subprocess
import sys

from support.import_graph import (ROOT, cycles, describe, function_level_imports, import_graph,
                                  source_modules)

#: The imports of package modules made inside a function, and why each stays there: a module
#: of the package (or every module under a package, for a key ending in ``.*``) -> the
#: modules it may import late (``*``: any) and the reason.  Everything else is imported at
#: module level, where the graph, the reader and the map see it.
DEFERRED_IMPORTS = {
    "neonlite.cli.errors": ("*", "the CLI's error handler is imported before anything that can "
                                 "fail to import, so it can report that failure in one line"),
    "neonlite.doctor.*": ("*", "`neonlite doctor` reports a broken install: each check imports "
                               "what it checks inside the check"),
    "neonlite.model": (("neonlite.interop.onnx.export", "neonlite.onnx_import"),
                       "a real cycle through neonlite/interop/__init__.py, which imports "
                       "convert.py, which imports Model"),
}


def test_the_graph_sees_the_source():
    graph = import_graph()
    assert "neonlite.backends.backend" in graph
    assert "neonlite.backends" in graph["neonlite"] or any(
        m.startswith("neonlite.backends") for m in graph["neonlite"])


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _deferral_of(module):
    for key, allowed in DEFERRED_IMPORTS.items():
        if module == key or key.endswith(".*") and (module == key[:-2] or
                                                      module.startswith(key[:-1])):
            return allowed
    return None


def _targets(deferral):
    """The targets a ``DEFERRED_IMPORTS`` value allows: one module, a tuple of them, or "*"."""
    return deferral[0] if isinstance(deferral[0], tuple) else (deferral[0],)


def _allowed(module, target):
    deferral = _deferral_of(module)
    return deferral is not None and ("*" in _targets(deferral) or target in _targets(deferral))


def test_function_level_imports_are_the_deferred_ones():
    """No function body imports a package module except where ``DEFERRED_IMPORTS`` says why:
    a dependency hidden in a function is one the graph's reader finds last."""
    hidden = sorted(f"{module} imports {target} inside a function" for module, target in
                    function_level_imports()
                    if not _allowed(module, target))
    assert not hidden, "import these at module level (or list the reason in " \
                       "DEFERRED_IMPORTS):\n" + "\n".join(hidden)


def test_every_deferral_is_still_needed():
    found = function_level_imports()
    stale = [(key, target) for key, deferral in DEFERRED_IMPORTS.items()
             for target in _targets(deferral)
             if not any(_deferral_of(m) == deferral and target in ("*", t) for m, t in found)]
    assert not stale, f"DEFERRED_IMPORTS lists deferrals no module makes: {stale}"


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles (module -> the members it imports):\n" + "\n".join(
        describe(c, graph) for c in found)


IMPORT_EACH_FIRST = """
import importlib, sys, traceback
failures = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "neonlite" or m.startswith("neonlite.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as err:
        failures.append(name + ": " + traceback.format_exception_only(type(err), err)[-1].strip())
print("\\n".join(failures))
sys.exit(1 if failures else 0)
"""


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module imported first, with no ``neonlite`` module loaded before it, in a new
    interpreter (so an import that works only after another module has been loaded fails)."""
    names = [n for n in sorted(source_modules()) if n.rsplit(".", 1)[-1] != "__main__"]
    env = dict(os.environ, PYTHONSAFEPATH="1")
    done = subprocess.run([sys.executable, "-c", IMPORT_EACH_FIRST, *names], capture_output=True,
                          text=True, timeout=600, cwd=str(ROOT.parent), env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
