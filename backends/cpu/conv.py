"""Convolution on the CPU (``Backend.fprop_conv``, ``bprop_conv``, ``update_conv``): the plan
:class:`CPUConvPlan`, which chooses each pass's algorithm once, at configure time, and runs
the passes on numpy arrays (its C modules and GEMM taken from the backend's kernel modules),
and the backend's ops (:class:`CPUConvOps`).

The algorithms, in the order they are chosen:

* ``pointwise``: a 1x1 filter with stride 1 and no padding is one GEMM per pass;
* ``direct``: the kernels of ``kernels/cpu/conv_direct.c`` (no patches) for output channels
  that are a whole number of vector registers and a filter block (R*S*C x four registers of
  output channels) within ``DIRECT_BLOCK_BYTES``, where it stays in L2; the data gradient is
  the forward convolution of the output gradient with the flipped, transposed filters, so it
  needs stride 1;
* ``tiled`` (where CBLAS comes from MKL): the C passes of ``kernels/cpu/conv.c``, in which each
  OpenMP thread gathers a few patch rows (about ``TILE_BYTES``) into its own buffer and
  multiplies them there with a single-threaded MKL GEMM, so the (N*P*Q, R*S*C) patch matrix is
  never written to memory and no thread waits on another inside a GEMM;
* ``im2col``: the patches of the batch gathered into one matrix and one BLAS GEMM per pass;
  ``update_conv`` reuses the patches its ``fprop_conv`` gathered from the same input (the
  backend contract: the input of ``update_conv`` is the input of the latest ``fprop_conv`` with
  that plan, unchanged since), and the data gradient is the transposed GEMM followed by a
  scatter-add (``col2im``).  A batch whose patch matrix would pass ``PATCH_BYTES`` is worked
  through in chunks of whole images.

Work arrays live in the plan's buffer table and are made on first use.
"""
from dataclasses import dataclass

import numpy as np

from ..operand_shapes import check_conv
from ..plans import ConvPlan
from ..reference import conv as reference
from . import conv_bf16
from .bf16_boundary import NOT_TAKEN
from .build import FLOATS, address, contiguous

PATCH_BYTES = 256 << 20
TILE_BYTES = 384 << 10
DIRECT_BLOCK_BYTES = 256 << 10


def _chunks(n, per_chunk):
    return ((n0, min(n, n0 + per_chunk)) for n0 in range(0, n, per_chunk))


@dataclass
class TileWork:
    """The tiled passes' choices: the MKL GEMM's address, threads, patch rows per tile."""

    gemm_address: int
    nwork: int
    tile: int


@dataclass
class DirectWork:
    """One direct-kernel pass: its module, its ``conv_geom`` struct and thread count."""

    module: object
    geom: object
    nwork: int


class CPUConvPlan(ConvPlan):
    """A :class:`ConvPlan` with the choices of ``kernels`` (a
    :class:`~neonlite.backends.cpu.build.KernelModules`, or None: numpy) for ``dtype``, made
    once when the layer is configured, and its passes :meth:`fprop`, :meth:`update` and
    :meth:`bprop` on numpy arrays (each True when it did the work, False where the algorithm is
    ``numpy`` or an array is not C-contiguous of the plan's data type).

    Fields: ``dtype``; ``gemm``, the kernel modules' GEMM; ``conv``, the cffi module of
    ``conv.c`` (None: the numpy reference runs every pass); ``geom``, its ``conv_geom`` struct; ``algorithm`` of fprop and update and
    ``bprop_algorithm`` (``pointwise``, ``direct``, ``tiled``, ``im2col`` or ``numpy``);
    ``direct`` and ``direct_transposed`` (:class:`DirectWork` or None); ``tiles``
    (:class:`TileWork` or None); ``per_chunk``, the images per im2col chunk; ``update_blocks``,
    the partial sums of the weight gradient (``conv_update_blocks``).
    """

    def __init__(self, N, C, H, W, K, R, S, pad=(0, 0), stride=(1, 1), dilation=(1, 1),
                 kernels=None, dtype=np.float32):
        super().__init__(N, C, H, W, K, R, S, pad, stride, dilation)
        self.dtype = np.dtype(dtype)
        self.conv = self.geom = self.direct = self.direct_transposed = self.tiles = None
        self.update_blocks = 1
        self.algorithm = self.bprop_algorithm = "numpy"
        self.per_chunk = 1
        self._patches_of = None
        self.gemm = None if kernels is None else kernels.gemm
        if kernels is not None and self.dtype in FLOATS:
            self._choose(kernels)

    def _choose(self, kernels):
        conv = kernels.module("conv", self.dtype)
        if conv is None:
            return
        self.conv = conv
        self.geom = self.geom_struct(conv, self.N)
        # the (R*S*C, K) partial sums of the weight gradient of the whole batch (the shape
        # alone sets how many, whatever the thread count; a chunk of fewer images makes no more)
        self.update_blocks = int(conv.lib.conv_update_blocks(self.geom))
        row = self.R * self.S * self.C
        image_bytes = self.P * self.Q * row * self.dtype.itemsize
        self.per_chunk = int(max(1, min(self.N, PATCH_BYTES // max(image_bytes, 1))))
        if self.pointwise:
            self.algorithm = self.bprop_algorithm = "pointwise"
            return
        self.direct = self._direct_work(kernels, conv, transposed=False)
        self.direct_transposed = self._direct_work(kernels, conv, transposed=True)
        gemm_address = getattr(kernels.gemm, "gemm_address", None)
        gemm_address = None if gemm_address is None else gemm_address(self.dtype)
        if gemm_address is not None:
            self.tiles = TileWork(gemm_address, max(1, int(conv.lib.conv_threads())),
                                  self.tile_rows(self.dtype.itemsize))
        passes = "tiled" if self.tiles is not None else "im2col"
        self.algorithm = "direct" if self.direct is not None else passes
        self.bprop_algorithm = "direct" if self.direct_transposed is not None else passes

    def _transposed_pads(self):
        return (self.dil_h * (self.R - 1) - self.pad_h, self.dil_w * (self.S - 1) - self.pad_w)

    def _direct_work(self, kernels, conv, transposed):
        """The direct kernels' pass (see the module docstring), or None where they do not
        apply.  ``transposed``: the data gradient, the forward convolution of the output
        gradient (N, P, Q, K) with the filters flipped and transposed to (R, S, K, C), padded by
        dil*(R-1) - pad."""
        c_in, c_out = (self.K, self.C) if transposed else (self.C, self.K)
        pads = self._transposed_pads()
        if transposed and (self.str_h != 1 or self.str_w != 1 or min(pads) < 0):
            return None
        module = kernels.module("conv_direct", self.dtype)
        if module is None:
            return None
        width = int(module.lib.conv_direct_width())
        if (c_out % width or self.R * self.S * c_in * min(c_out, 4 * width)
                * self.dtype.itemsize > DIRECT_BLOCK_BYTES):
            return None
        if transposed:
            dims = {"H": self.P, "W": self.Q, "C": self.K, "P": self.H, "Q": self.W,
                    "K": self.C, "pad_h": pads[0], "pad_w": pads[1], "str_h": 1, "str_w": 1}
        else:
            dims = {"H": self.H, "W": self.W, "C": self.C, "P": self.P, "Q": self.Q,
                    "K": self.K, "pad_h": self.pad_h, "pad_w": self.pad_w,
                    "str_h": self.str_h, "str_w": self.str_w}
        geom = module.ffi.new("conv_geom *", {"N": self.N, "R": self.R, "S": self.S,
                                              "dil_h": self.dil_h, "dil_w": self.dil_w, **dims})
        return DirectWork(module, geom, max(1, int(conv.lib.conv_threads())))

    def tile_rows(self, itemsize):
        """Output rows (of Q patches) per tile of the tiled passes: their patches, elements of
        ``itemsize`` bytes, about ``TILE_BYTES``."""
        return int(max(1, TILE_BYTES // (self.Q * self.R * self.S * self.C * itemsize)))

    def geom_struct(self, module, n):
        """The ``conv_geom`` struct of this convolution in ``module``'s ffi (the patch kernels'
        or another module's that takes one), for a batch of ``n`` images; made once per
        module."""
        geoms = self.__dict__.setdefault("_geoms", {})
        geom = geoms.get(module.ffi)
        if geom is None:
            geom = geoms[module.ffi] = module.ffi.new("conv_geom *", {
                "N": self.N, "H": self.H, "W": self.W, "C": self.C, "P": self.P,
                "Q": self.Q, "R": self.R, "S": self.S, "pad_h": self.pad_h,
                "pad_w": self.pad_w, "str_h": self.str_h, "str_w": self.str_w,
                "dil_h": self.dil_h, "dil_w": self.dil_w, "K": self.K})
        geom.N = n
        return geom

    def geom_for(self, n):
        """The ``conv_geom`` struct for a batch of ``n`` images."""
        self.geom.N = n
        return self.geom

    def direct_buffers(self, transposed, n):
        """(geom for ``n`` images, work, partials or None, flipped filter or None) of the
        direct pass ``transposed`` selects."""
        work = self.direct_transposed if transposed else self.direct
        work.geom.N = n
        if transposed:
            pads = self._transposed_pads()
            padded = (self.P + 2 * pads[0]) * (self.Q + 2 * pads[1]) * self.K
        else:
            padded = (self.H + 2 * self.pad_h) * (self.W + 2 * self.pad_w) * self.C
        buf = self.buffer(f"direct work {transposed}", (work.nwork * padded,), self.dtype)
        partials = None if transposed else self.buffer(
            "direct partials", (self.update_blocks * self.R * self.S * self.C * self.K,),
            self.dtype)
        flipped = self.buffer("flipped filter", (self.R, self.S, self.K, self.C),
                              self.dtype) if transposed else None
        return work.geom, buf, partials, flipped

    def tile_buffers(self):
        """(work, partials) of the tiled passes."""
        row = self.R * self.S * self.C
        nwork, tile = self.tiles.nwork, self.tiles.tile
        return (self.buffer("tile work", (nwork * tile * self.Q * row,), self.dtype),
                self.buffer("tile partials", (self.update_blocks * row * self.K,),
                            self.dtype))

    def patch_buffers(self):
        """(patch matrix (per_chunk*P*Q, R*S*C), weight gradient (R*S*C, K)) of im2col."""
        row = self.R * self.S * self.C
        return (self.buffer("patches", (self.per_chunk * self.P * self.Q, row), self.dtype),
                self.buffer("weight gradient", (row, self.K), self.dtype))

    def remember_patches(self, x):
        """The patch buffer now holds the patches of all of ``x``."""
        self._patches_of = (address(x), x.shape)

    def forget_patches(self):
        self._patches_of = None

    def holds_patches_of(self, x):
        return self._patches_of == (address(x), x.shape)

    def _ready(self, *arrays):
        """The C kernels run this pass on ``arrays``: chosen, of the plan's type, contiguous."""
        return self.conv is not None and arrays[0].dtype == self.dtype and contiguous(*arrays)

    def fprop(self, x, f, o, bias=None, relu=False):
        """o (N, P, Q, K) = conv(x (N, H, W, C), f (R, S, C, K)) (+ bias (K,), then ReLU when
        ``relu``: the epilogue runs on each block of output rows while it is in cache, or, after
        a whole-matrix GEMM, as one more pass)."""
        if not self._ready(*((x, f, o) if bias is None else (x, f, o, bias))):
            return False
        K, PQ, n = self.K, self.P * self.Q, x.shape[0]
        f2, o2 = f.reshape(-1, K), o.reshape(-1, K)
        ffi, lib = self.conv.ffi, self.conv.lib
        buf = ffi.from_buffer
        bias_ptr = ffi.NULL if bias is None else buf("real[]", bias)
        relu = int(bool(relu))
        self.forget_patches()
        if self.algorithm == "pointwise":
            self.gemm.matmul(x.reshape(-1, self.C), f2, out=o2)
            lib.conv_bias_relu(buf("real[]", o), o2.shape[0], K, bias_ptr, relu)
        elif self.algorithm == "direct":
            geom, work, _, _ = self.direct_buffers(False, n)
            dmod = self.direct.module
            dbuf = dmod.ffi.from_buffer
            dbias = dmod.ffi.NULL if bias is None else dbuf("real[]", bias)
            dmod.lib.conv_direct(dbuf("real[]", x), dbuf("real[]", f), dbuf("real[]", o), geom,
                                 dbuf("real[]", work), self.direct.nwork, 0.0, dbias, relu)
        elif self.algorithm == "tiled":
            work, _ = self.tile_buffers()
            lib.conv_fprop_tiled(buf("real[]", x), buf("real[]", f), buf("real[]", o),
                                 self.geom_for(n), self.tiles.gemm_address,
                                 buf("real[]", work), self.tiles.nwork, self.tiles.tile,
                                 bias_ptr, relu)
        else:
            cols, _ = self.patch_buffers()
            geom = self.geom_for(n)
            xp, cp, op = buf("real[]", x), buf("real[]", cols), buf("real[]", o)
            for n0, n1 in _chunks(n, self.per_chunk):
                lib.im2col(xp, cp, geom, n0, n1)
                self.gemm.matmul(cols[:(n1 - n0) * PQ], f2, out=o2[n0 * PQ:n1 * PQ])
                lib.conv_bias_relu(op + n0 * PQ * K, (n1 - n0) * PQ, K, bias_ptr, relu)
            if n <= self.per_chunk:
                self.remember_patches(x)
        return True

    def update(self, x, e, grad_f, beta=0.0):
        """grad_f (R, S, C, K) = beta * grad_f + patches(x)^T @ e (N*P*Q, K)."""
        if not self._ready(x, e, grad_f):
            return False
        K, PQ, n = self.K, self.P * self.Q, x.shape[0]
        e2, g2 = e.reshape(-1, K), grad_f.reshape(-1, K)
        ffi, lib = self.conv.ffi, self.conv.lib
        buf = ffi.from_buffer
        if self.algorithm == "direct":
            geom, work, partials, _ = self.direct_buffers(False, n)
            dbuf = self.direct.module.ffi.from_buffer
            self.direct.module.lib.conv_direct_update(
                dbuf("real[]", x), dbuf("real[]", e), dbuf("real[]", grad_f), geom,
                dbuf("real[]", work), dbuf("real[]", partials), self.direct.nwork, beta)
            return True
        if self.algorithm == "tiled":
            work, partials = self.tile_buffers()
            lib.conv_update_tiled(buf("real[]", x), buf("real[]", e), buf("real[]", grad_f),
                                  self.geom_for(n), self.tiles.gemm_address,
                                  buf("real[]", work), buf("real[]", partials),
                                  self.tiles.nwork, self.tiles.tile, beta)
            return True
        cols, dw = self.patch_buffers()
        if self.algorithm == "pointwise":
            self.gemm.matmul(x.reshape(-1, self.C).T, e2, out=dw)
            reference.accumulate(g2, dw, beta)
            return True
        if self.holds_patches_of(x):
            self.gemm.matmul(cols[:n * PQ].T, e2, out=dw)
            reference.accumulate(g2, dw, beta)
            return True
        geom = self.geom_for(n)
        xp, cp = buf("real[]", x), buf("real[]", cols)
        for i, (n0, n1) in enumerate(_chunks(n, self.per_chunk)):
            lib.im2col(xp, cp, geom, n0, n1)
            self.gemm.matmul(cols[:(n1 - n0) * PQ].T, e2[n0 * PQ:n1 * PQ], out=dw)
            reference.accumulate(g2, dw, beta if i == 0 else 1.0)
        self.forget_patches()
        return True

    def bprop(self, f, e, grad_x, beta=0.0):
        """grad_x (N, H, W, C) = beta * grad_x + data gradient of e (N, P, Q, K) through f."""
        if not self._ready(f, e, grad_x):
            return False
        K, PQ, n = self.K, self.P * self.Q, e.shape[0]
        e2, fT = e.reshape(-1, K), f.reshape(-1, K).T
        ffi, lib = self.conv.ffi, self.conv.lib
        buf = ffi.from_buffer
        self.forget_patches()
        if self.bprop_algorithm == "direct":
            geom, work, _, flipped = self.direct_buffers(True, n)
            np.copyto(flipped, f[::-1, ::-1].transpose(0, 1, 3, 2))
            dmod = self.direct_transposed.module
            dbuf = dmod.ffi.from_buffer
            dmod.lib.conv_direct(dbuf("real[]", e), dbuf("real[]", flipped),
                                 dbuf("real[]", grad_x), geom, dbuf("real[]", work),
                                 self.direct_transposed.nwork, beta, dmod.ffi.NULL, 0)
            return True
        if self.bprop_algorithm == "tiled":
            work, _ = self.tile_buffers()
            lib.conv_bprop_tiled(buf("real[]", e), buf("real[]", f), buf("real[]", grad_x),
                                 self.geom_for(n), self.tiles.gemm_address,
                                 buf("real[]", work), self.tiles.nwork, self.tiles.tile, beta)
            return True
        cols, _ = self.patch_buffers()
        if self.bprop_algorithm == "pointwise":
            gx = grad_x.reshape(-1, self.C)
            if beta == 0.0:
                self.gemm.matmul(e2, fT, out=gx)
                return True
            for n0, n1 in _chunks(n, self.per_chunk):
                rows = slice(n0 * PQ, n1 * PQ)
                self.gemm.matmul(e2[rows], fT, out=cols[:(n1 - n0) * PQ])
                reference.accumulate(gx[rows], cols[:(n1 - n0) * PQ], beta)
            return True
        geom = self.geom_for(n)
        gp, cp = buf("real[]", grad_x), buf("real[]", cols)
        for n0, n1 in _chunks(n, self.per_chunk):
            self.gemm.matmul(e2[n0 * PQ:n1 * PQ], fT, out=cols[:(n1 - n0) * PQ])
            lib.col2im(cp, gp, geom, n0, n1, beta)
        return True


class CPUConvOps:
    """``Backend.conv_layer`` and the convolution passes of
    :class:`~neonlite.backends.cpu.backend.CPUBackend`: the plan's C passes where it chose
    them, else the numpy reference."""

    def conv_layer(self, N, C, H, W, K, R, S, pad=(0, 0), stride=(1, 1), dilation=(1, 1)):
        return CPUConvPlan(N, C, H, W, K, R, S, pad, stride, dilation, kernels=self.kernels,
                           dtype=self.compute_dtype)

    def fprop_conv(self, plan, I, F, O, bias=None, relu=False):
        check_conv("fprop_conv", plan, I=I, F=F, O=O, bias=bias)
        b = None if bias is None else bias._ary
        if not (isinstance(plan, CPUConvPlan) and plan.fprop(I._ary, F._ary, O._ary, b, relu)):
            reference.fprop_conv(plan, I._ary, F._ary, O._ary, b, relu)

    def bprop_conv(self, plan, F, E, grad_I, beta=0.0):
        check_conv("bprop_conv", plan, F=F, E=E, grad_I=grad_I)
        if not (isinstance(plan, CPUConvPlan)
                and plan.bprop(F._ary, E._ary, grad_I._ary, beta)):
            reference.bprop_conv(plan, F._ary, E._ary, grad_I._ary, beta)

    def update_conv(self, plan, I, E, grad_F, beta=0.0):
        check_conv("update_conv", plan, I=I, E=E, grad_F=grad_F)
        if not (isinstance(plan, CPUConvPlan)
                and plan.update(I._ary, E._ary, grad_F._ary, beta)):
            reference.update_conv(plan, I._ary, E._ary, grad_F._ary, beta)

    def fused_fprop_conv(self, arguments):
        """``fprop_conv`` on bf16 operands by the plan's bf16 kernels (``conv_bf16.py``), else
        ``NOT_TAKEN`` (the bf16 boundary widens and narrows)."""
        a = arguments
        arrays = conv_bf16.bf16_arrays(a["I"], a["F"], a["O"], a["bias"])
        if arrays is None or not isinstance(a["plan"], CPUConvPlan):
            return NOT_TAKEN
        check_conv("fprop_conv", a["plan"], I=a["I"], F=a["F"], O=a["O"], bias=a["bias"])
        return None if conv_bf16.fprop(a["plan"], *arrays, a["relu"],
                                       self.bf16_conv_compute()) else NOT_TAKEN

    def fused_bprop_conv(self, arguments):
        """``bprop_conv`` on bf16 operands (as :meth:`fused_fprop_conv`)."""
        a = arguments
        arrays = conv_bf16.bf16_arrays(a["F"], a["E"], a["grad_I"])
        if arrays is None or not isinstance(a["plan"], CPUConvPlan):
            return NOT_TAKEN
        check_conv("bprop_conv", a["plan"], F=a["F"], E=a["E"], grad_I=a["grad_I"])
        return None if conv_bf16.bprop(a["plan"], *arrays, a["beta"],
                                       self.bf16_conv_compute()) else NOT_TAKEN

    def fused_update_conv(self, arguments):
        """``update_conv`` on bf16 operands (as :meth:`fused_fprop_conv`)."""
        a = arguments
        arrays = conv_bf16.bf16_arrays(a["I"], a["E"], a["grad_F"])
        if arrays is None or not isinstance(a["plan"], CPUConvPlan):
            return NOT_TAKEN
        check_conv("update_conv", a["plan"], I=a["I"], E=a["E"], grad_F=a["grad_F"])
        return None if conv_bf16.update(a["plan"], *arrays, a["beta"],
                                        self.bf16_conv_compute()) else NOT_TAKEN
