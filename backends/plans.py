"""Plans: the shape arithmetic of convolution and pooling, computed once at configure time.

A backend subclasses the plans it uses (``CPUConvPlan(ConvPlan)``, ``GPUConvPlan(ConvPlan)``,
...) with explicit fields for what it chooses at configure time (the algorithm, tiles, launch
shapes); layers treat a plan as opaque and only hand it back to the backend.  Work arrays live
in the plan's :meth:`Plan.buffer` table, which only the plan's own methods write.
"""
import numpy as np


def _pair(value, what):
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) != 2 or not all(isinstance(v, int) for v in value):
        raise ValueError(f"{what} must be an int or a pair of ints, got {value!r}")
    return value


def output_size(size, filt, pad, stride, dilation=1):
    """Output length of a convolution/pooling window along one axis."""
    return (size + 2 * pad - dilation * (filt - 1) - 1) // stride + 1


class Plan:
    """The work-array table every plan has: :meth:`buffer` returns the array kept under a name,
    made (or remade, when the shape or dtype differs) on request; :meth:`buffers` lists them
    (the profiler counts them as a layer's work memory)."""

    def __init__(self):
        self._buffers = {}

    def buffer(self, name, shape, dtype, fill=None, make=None, empty=np.empty):
        """The array of ``shape`` and ``dtype`` kept under ``name``, made by ``empty(shape,
        dtype)`` (an allocator that aligns, say).  When it is made it is filled with ``fill``,
        or written by ``make(array)``; its contents are the caller's otherwise."""
        shape, dtype = tuple(int(n) for n in shape), np.dtype(dtype)
        found = self._buffers.get(name)
        if found is None or found.shape != shape or found.dtype != dtype:
            found = empty(shape, dtype)
            if fill is not None:
                found.fill(fill)
            if make is not None:
                make(found)
            self._buffers[name] = found
        return found

    def buffers(self):
        """The work arrays this plan holds."""
        return list(self._buffers.values())


class ConvPlan(Plan):
    """Dimensions of a 2-D convolution on NHWC input with (R, S, C, K) filters.

    Input I (N, H, W, C), filters F (R, S, C, K), output O (N, P, Q, K), where
    P = (H + 2*pad_h - dil_h*(R-1) - 1) // str_h + 1 and likewise Q.
    """

    def __init__(self, N, C, H, W, K, R, S, pad=(0, 0), stride=(1, 1), dilation=(1, 1)):
        super().__init__()
        self.N, self.C, self.H, self.W, self.K, self.R, self.S = N, C, H, W, K, R, S
        self.pad_h, self.pad_w = _pair(pad, "padding")
        self.str_h, self.str_w = _pair(stride, "strides")
        self.dil_h, self.dil_w = _pair(dilation, "dilation")
        if min(self.str_h, self.str_w, self.dil_h, self.dil_w) < 1 or min(self.pad_h, self.pad_w) < 0:
            raise ValueError(f"strides and dilation must be >= 1 and padding >= 0, got "
                             f"strides={(self.str_h, self.str_w)}, dilation={(self.dil_h, self.dil_w)}, "
                             f"padding={(self.pad_h, self.pad_w)}")
        self.P = output_size(H, R, self.pad_h, self.str_h, self.dil_h)
        self.Q = output_size(W, S, self.pad_w, self.str_w, self.dil_w)
        if self.P < 1 or self.Q < 1:
            raise ValueError(f"a {R}x{S} filter (dilation {(self.dil_h, self.dil_w)}, padding "
                             f"{(self.pad_h, self.pad_w)}) does not fit a {H}x{W} input")

    @property
    def in_shape(self):
        return (self.N, self.H, self.W, self.C)

    @property
    def out_shape(self):
        return (self.N, self.P, self.Q, self.K)

    @property
    def filter_shape(self):
        return (self.R, self.S, self.C, self.K)

    @property
    def pointwise(self):
        """A 1x1 filter with stride 1 and no padding: the convolution is one GEMM."""
        return (self.R == self.S == 1 and self.str_h == self.str_w == 1
                and self.pad_h == self.pad_w == 0)

    def flops(self):
        """Multiply-adds x 2 of one fprop (bprop and update cost the same each)."""
        return 2.0 * self.N * self.P * self.Q * self.K * self.R * self.S * self.C


class PoolPlan(Plan):
    """Dimensions of 2-D max/avg pooling on NHWC input (N, H, W, C) -> (N, P, Q, C).

    Windows may overlap (stride < window); padded positions never win a max and are not
    counted in an average.
    """

    def __init__(self, op, N, C, H, W, R, S, pad=(0, 0), stride=(1, 1)):
        super().__init__()
        if op not in ("max", "avg"):
            raise ValueError(f"pooling op must be 'max' or 'avg', got {op!r}")
        self.op = op
        self.N, self.C, self.H, self.W, self.R, self.S = N, C, H, W, R, S
        self.pad_h, self.pad_w = _pair(pad, "padding")
        self.str_h, self.str_w = _pair(stride, "strides")
        if self.pad_h >= R or self.pad_w >= S:
            raise ValueError(f"pooling padding {(self.pad_h, self.pad_w)} must be smaller than "
                             f"the window {(R, S)}")
        self.P = output_size(H, R, self.pad_h, self.str_h)
        self.Q = output_size(W, S, self.pad_w, self.str_w)
        if self.P < 1 or self.Q < 1:
            raise ValueError(f"a {R}x{S} pooling window does not fit a {H}x{W} input")

    @property
    def in_shape(self):
        return (self.N, self.H, self.W, self.C)

    @property
    def out_shape(self):
        return (self.N, self.P, self.Q, self.C)
