"""The row of ``neonlite doctor`` about bfloat16 on the CPU: which path each op class takes
(``backends/cpu/bf16_choice.py``: measured once per machine, or ``NEONLITE_BF16``), and the
measured bf16 and float32 peaks (the bf16 GEMM module's dot-product chains, the FMA kernel of
:mod:`neonlite.cpu_peak`)."""
import os

from .report import OK, WARN, Row, one_line


def _bf16_peak(module):
    """GFLOP/s of the bf16 GEMM module's peak kernel on the usable cores."""
    from ..backends.cpu.threads import usable_cores
    from ..cpu_peak import measure_gflops
    return measure_gflops(module.lib.nl_bf16_peak_run, usable_cores(),
                          new_best=lambda n: module.ffi.new("double[]", n))


def bf16_row(kernels=None):
    """The ``bf16`` row: ``kernels`` a :class:`~neonlite.backends.cpu.build.KernelModules`
    (default: a new one on the process's kernel builder)."""
    from ..backends.cpu import bf16_choice
    from ..backends.cpu.bf16_kernels import gemm_module
    from ..backends.cpu.build import KernelModules
    from ..cpu_peak import cpu_peak_gflops
    kernels = KernelModules() if kernels is None else kernels
    try:
        choice = bf16_choice.choose(kernels)
    except ValueError as err:
        return Row("bf16", WARN, one_line(err), f"set {bf16_choice.ENV} to compute, storage "
                   f"or off, or unset it to measure")
    paths = "; ".join(f"{c} {choice.paths[c]} ({choice.reasons[c]})"
                      for c in bf16_choice.OP_CLASSES)
    module, why = gemm_module(kernels)
    try:
        peak = f"{_bf16_peak(module):.0f} GFLOP/s ({choice.variant})" if module else \
            f"not measured: {why}"
    except Exception as err:  # a peak that cannot be measured is a row, not a crash
        peak = f"not measured: {one_line(err)}"
    f32, _ = cpu_peak_gflops()
    f32_text = f"{f32:.0f} GFLOP/s (FMA)" if f32 else "not measured"
    override = os.environ.get(bf16_choice.ENV, "").strip()
    note = f" [{bf16_choice.ENV}={override}]" if override else ""
    return Row("bf16", OK, f"{paths}; peaks: bf16 {peak}, float32 {f32_text}{note}")
