"""Import every module of the installed ``neonlite`` distribution and say where each came from.

    python tests/support/import_every_module.py [--outside DIR]

The module list comes from the installed distribution's own file list (its wheel ``RECORD``,
through ``importlib.metadata``), so a module that the wheel lacks cannot be missed, and one that
imports a module the wheel lacks fails here.  ``__main__`` modules are located, not run.  With
``--outside DIR`` every module must come from outside ``DIR`` (the checkout): that is how CI
proves it tested the installed package.  Exit status 0, or 1 with one line per failure.  Used by
``.ci/run`` and ``tests/api/project/test_packaging.py``.
"""
import argparse
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import traceback


def installed_modules(distribution="neonlite"):
    """Dotted names of every Python module the installed ``distribution`` holds, sorted."""
    names = set()
    for path in importlib.metadata.files(distribution) or ():
        parts = path.parts
        if path.suffix != ".py" or not parts or parts[0] != "neonlite":
            continue
        stem = parts[:-1] if parts[-1] == "__init__.py" else (*parts[:-1], parts[-1][:-3])
        names.add(".".join(stem))
    return sorted(names)


def _origin(name):
    """The file module ``name`` comes from: imported, or only located for ``__main__``."""
    if name.rsplit(".", 1)[-1] == "__main__":
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ImportError(f"no module named {name!r}")
        return spec.origin
    return importlib.import_module(name).__file__


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outside", metavar="DIR",
                        help="fail when a module is imported from under this folder")
    args = parser.parse_args(argv)
    outside = os.path.realpath(args.outside) + os.sep if args.outside else None
    modules = installed_modules()
    if not modules:
        print("import_every_module: the installed neonlite distribution lists no modules")
        return 1
    failures = []
    for name in modules:
        try:
            origin = os.path.realpath(_origin(name))
        except Exception as err:  # report every module that fails, whatever it raised
            last = traceback.format_exception_only(type(err), err)[-1].strip()
            failures.append(f"{name}: {last}")
            continue
        if outside and origin.startswith(outside):
            failures.append(f"{name}: imported from the checkout ({origin}), not the install")
    for line in failures:
        print(f"import_every_module: FAILED {line}")
    where = os.path.dirname(os.path.realpath(importlib.import_module("neonlite").__file__)) \
        if not failures else "?"
    print(f"import_every_module: {len(modules) - len(failures)} of {len(modules)} modules "
          f"imported (neonlite from {where}, python {sys.executable})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
