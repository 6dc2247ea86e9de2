"""One naming rule for the backends' section classes: a class mixed into a backend is
``<CPU|GPU><Family>Ops``, a class mixed into ``CPUKernels`` (the C calls on arrays) is
``<Family>Kernels``, and a plan subclass is ``<CPU|GPU><Family>Plan``."""
import re

from neonlite.backends.cpu.backend import CPUBackend
from neonlite.backends.cpu.kernels import CPUKernels
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
    wrong += [f"{c.__module__}.{c.__name__}"
              for c in _sections(CPUKernels, "neonlite.backends.cpu")
              if c.__name__ != "KernelModules" and not re.fullmatch(r"[A-Z]\w*Kernels",
                                                                    c.__name__)]
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
