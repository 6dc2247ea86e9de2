"""One naming rule for the backends' section classes (``backends/ops/dispatch.py`` states it): a
class mixed into a backend is ``<CPU|GPU><Family>Ops``, a plan subclass is
``<CPU|GPU><Family>Plan``, and no other class of a section file is a base of the kernel
modules (the C calls on arrays are module functions or plan methods)."""
import importlib
import inspect
import pkgutil
import re

import neonlite.backends.cpu
import neonlite.backends.gpu
from neonlite.backends.cpu.backend import CPUBackend
from neonlite.backends.cpu.build import KernelModules
from neonlite.backends.plans import Plan


def _gpu_backend():
    from neonlite.backends.gpu.backend import GPUBackend
    return GPUBackend


def _sections(cls, package):
    return [base for base in cls.__mro__[1:] if base.__module__.startswith(package)]


def test_backend_sections_are_named_by_one_rule():
    wrong = []
    for backend, prefix, package in ((CPUBackend, "CPU", "neonlite.backends.cpu"),
                                     (_gpu_backend(), "GPU", "neonlite.backends.gpu")):
        wrong += [f"{c.__module__}.{c.__name__}" for c in _sections(backend, package)
                  if not re.fullmatch(prefix + r"[A-Z]\w*Ops", c.__name__)]
    assert _sections(KernelModules, "neonlite.backends.cpu") == []
    assert wrong == []


def test_no_kernel_glue_or_mixin_classes():
    """No ``...Kernels`` glue class (the C calls of a section mixed into the kernel modules, a
    second copy of each op's signature) and no ``...Mixin`` in the backends' packages: a
    section's kernel calls are module functions or plan methods, its contract methods an
    ``...Ops`` class."""
    wrong = []
    for package in (neonlite.backends.cpu, neonlite.backends.gpu):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            wrong += [f"{module.__name__}.{name}" for name, c in vars(module).items()
                      if inspect.isclass(c) and c.__module__ == module.__name__
                      and re.search(r"(?<!Module)Kernels$|Mixin$", name)]
    assert wrong == []


def test_plan_subclasses_are_named_by_backend_and_family():
    _gpu_backend()  # its plans are imported with it

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)
    wrong = [f"{c.__module__}.{c.__name__}" for c in subclasses(Plan)
             if c.__module__.startswith(("neonlite.backends.cpu", "neonlite.backends.gpu"))
             and not re.fullmatch(r"(CPU|GPU)[A-Z]\w*Plan", c.__name__)]
    assert wrong == []
