"""The CPU backend's whole-recurrent-sequence passes (the gate steps are dispatched by the op
table, ``ops/recurrent.py``).

The whole-sequence passes of every cell (``Backend.rnn_fprop_sequence``,
``lstm_fprop_sequence``, ``gru_fprop_sequence`` and their bprops) run their loop over time in
C (``kernels/cpu/recurrent_sequences.c``) when MKL gives the C code its packed GEMMs (U
packed once per pass, the recurrent product of each step then called from the C kernel's own
threads, each on its units; the packed pieces live in ``KernelModules.workspaces``); on one
thread or on all of them, whichever was measured faster for the shape (``blas.WayTuner``:
the small per-step GEMMs gain little from a second thread on a busy machine).  Otherwise the
steps run one by one.
"""
import time

import numpy as np

from ..operand_shapes import check_sequence
from ..shared.recurrent_steps import ACTIVATION_CODES
from .blas import WayTuner


def _ary(t):
    return None if t is None else t._ary


class CPURecurrentOps:
    """``Backend.*_sequence`` passes for the CPU backend (mixed into ``CPUBackend``)."""

    def _sequence_kernel(self, arrays, N, H, k, per_chunk):
        """(module, (pack, compute) addresses, MKL library, packed work array, its stride) of
        the whole-sequence kernels for these arrays (None entries allowed), whose GEMMs
        multiply (N, k) rows by ``per_chunk`` pieces of a (k, .) matrix per chunk of the H
        units; None where the C kernels or MKL's packed GEMMs cannot run."""
        gemm, dtype = self.kernels.gemm, arrays[0].dtype
        packed_gemm = getattr(gemm, "packed_gemm", None)
        found = None if packed_gemm is None else packed_gemm(dtype)
        module = None if found is None else \
            self.kernels.usable("recurrent_sequences", *[a for a in arrays if a is not None])
        if module is None:
            return None
        pack, compute, size = found
        chunk = int(module.lib.recurrent_sequence_chunk())
        pieces = -(-H // chunk) * per_chunk
        key = ("recurrent_packed", dtype, N, H, k, per_chunk)
        work = self.kernels.workspaces.get(key)
        if work is None:
            stride = -(-size(N, min(chunk, H), k) // 16) * 16
            work = self.kernels.workspaces[key] = np.empty(pieces * stride, dtype)
        return module, (pack, compute), gemm.lib, work, work.size // pieces

    def _run_sequence(self, name, key, found, args):
        """C function ``name`` of ``found`` on ``args`` (arrays, None for NULL, numbers), the
        pack and compute addresses and a thread count, the way ``key`` was measured fastest;
        MKL runs single-threaded on the calling thread meanwhile (its other calls come from
        the kernel's OpenMP threads)."""
        module, addresses, mkl = found[:3]
        tuner = getattr(self, "_sequence_tuner", None)
        if tuner is None:
            tuner = self._sequence_tuner = WayTuner()
        way = tuner.pick(key, lambda: ("one", "all"))
        ffi = module.ffi
        args = [ffi.NULL if a is None else ffi.from_buffer("real[]", a)
                if isinstance(a, np.ndarray) else a for a in args]
        previous = mkl.MKL_Set_Num_Threads_Local(1)
        start = time.perf_counter()
        try:
            getattr(module.lib, name)(*args, *addresses, 1 if way == "one" else 0)
        finally:
            mkl.MKL_Set_Num_Threads_Local(previous)
        tuner.record(key, way, time.perf_counter() - start)

    def _sequence_pass(self, name, tensors, before, numbers, T, N, H, blocks, backward):
        """Run C pass ``name`` on ``tensors[:before]``, the packed work array and its stride,
        ``tensors[before:]``, T, N, H and ``numbers``, for a cell of ``blocks`` gate blocks
        (U (H, blocks * H)); the mask is ``tensors[-1]``.  False where it cannot run."""
        arrays = [_ary(t) for t in tensors]
        k, per_chunk = (blocks * H, 1) if backward else (H, blocks)
        found = self._sequence_kernel(arrays, N, H, k, per_chunk)
        if found is None:
            return False
        work, stride = found[3:]
        self._run_sequence(name, (name, T, N, H, arrays[-1] is None), found,
                           [*arrays[:before], work, stride, *arrays[before:], T, N, H,
                            *numbers])
        return True

    def rnn_fprop_sequence(self, xg, hg, U, h, mask=None, reverse=False, activation="tanh"):
        check_sequence("rnn_fprop_sequence", "rnn", "xg", xg=xg, hg=hg, U=U, h=h, mask=mask)
        T, N, H = xg.shape
        if not self._sequence_pass("rnn_fprop_sequence", (xg, hg, U, h, mask), 3,
                                   (int(reverse), ACTIVATION_CODES[activation]), T, N, H, 1,
                                   False):
            super().rnn_fprop_sequence(xg, hg, U, h, mask, reverse, activation)

    def rnn_bprop_sequence(self, h, U, dy, dh, dpre, mask=None, reverse=False,
                           activation="tanh"):
        check_sequence("rnn_bprop_sequence", "rnn", "dpre", dpre=dpre, h=h, U=U, dy=dy, dh=dh,
                       mask=mask)
        T, N, H = dpre.shape
        if not self._sequence_pass("rnn_bprop_sequence", (h, U, dy, dh, dpre, mask), 2,
                                   (int(reverse), ACTIVATION_CODES[activation]), T, N, H, 1,
                                   True):
            super().rnn_bprop_sequence(h, U, dy, dh, dpre, mask, reverse, activation)

    def lstm_fprop_sequence(self, gates, hg, U, c, h, mask=None, reverse=False,
                            activation="tanh", gate_activation="logistic"):
        check_sequence("lstm_fprop_sequence", "lstm", "gates", gates=gates, hg=hg, U=U, c=c, h=h,
                       mask=mask)
        T, N, G = gates.shape
        codes = (int(reverse), ACTIVATION_CODES[activation], ACTIVATION_CODES[gate_activation])
        if not self._sequence_pass("lstm_fprop_sequence", (gates, hg, U, c, h, mask), 3, codes,
                                   T, N, G // 4, 4, False):
            super().lstm_fprop_sequence(gates, hg, U, c, h, mask, reverse, activation,
                                        gate_activation)

    def lstm_bprop_sequence(self, gates, U, c, dy, dh, dc, dgates, mask=None, reverse=False,
                            activation="tanh", gate_activation="logistic"):
        check_sequence("lstm_bprop_sequence", "lstm", "gates", gates=gates, U=U, c=c, dy=dy,
                       dh=dh, dc=dc, dgates=dgates, mask=mask)
        T, N, G = gates.shape
        codes = (int(reverse), ACTIVATION_CODES[activation], ACTIVATION_CODES[gate_activation])
        if not self._sequence_pass("lstm_bprop_sequence", (gates, U, c, dy, dh, dc, dgates, mask),
                                   2, codes, T, N, G // 4, 4, True):
            super().lstm_bprop_sequence(gates, U, c, dy, dh, dc, dgates, mask, reverse,
                                        activation, gate_activation)

    def gru_fprop_sequence(self, gates, hg, U, bias_h, hn, h, mask=None, reverse=False):
        check_sequence("gru_fprop_sequence", "gru", "gates", gates=gates, hg=hg, U=U,
                       bias_h=bias_h, hn=hn, h=h, mask=mask)
        T, N, G = gates.shape
        if not self._sequence_pass("gru_fprop_sequence", (gates, hg, U, bias_h, hn, h, mask), 3,
                                   (int(reverse),), T, N, G // 3, 3, False):
            super().gru_fprop_sequence(gates, hg, U, bias_h, hn, h, mask, reverse)

    def gru_bprop_sequence(self, gates, U, hn, h, dy, dh, dgx, dgh, mask=None, reverse=False):
        check_sequence("gru_bprop_sequence", "gru", "gates", gates=gates, U=U, hn=hn, h=h, dy=dy,
                       dh=dh, dgx=dgx, dgh=dgh, mask=mask)
        T, N, G = gates.shape
        if not self._sequence_pass("gru_bprop_sequence",
                                   (gates, U, hn, h, dy, dh, dgx, dgh, mask), 2, (int(reverse),),
                                   T, N, G // 3, 3, True):
            super().gru_bprop_sequence(gates, U, hn, h, dy, dh, dgx, dgh, mask, reverse)
