"""Rows of a table and axis permutations on the GPU (``Backend.take_rows``,
``scatter_add_rows``, ``permute_axes``): the kernels of ``kernels/cuda/rows.cu`` and
``transpose.cu``.  A bad id is found on the device and raised as one IndexError naming it.
Strided tables and rows go through contiguous copies (``dense.on_dense``)."""
import numpy as np

from ..operand_shapes import check_permute, check_table_rows
from ..reference.rows import row_indices
from .dense import on_dense

_NUMPY_IDS = {"i32": "i32", "i64": "i64", "f32": "f32"}


class GPURowOps:
    """The row and layout ops of :class:`~neonlite.backends.gpu.backend.GPUBackend`."""

    def _ids(self, ids):
        if ids.storage in _NUMPY_IDS and ids.is_contiguous:
            return ids, _NUMPY_IDS[ids.storage]
        copy = self.scratch(("ids", ids.shape), ids.shape, np.float32)
        copy[:] = ids
        return copy, "f32"

    def _check_ids(self, ids, bad, V):
        """Raise the reference's IndexError (the first bad id, shown as the whole number or
        the fraction it is, and its position) when the kernel flagged one."""
        first = int(bad.get()[0])
        if first < ids.size:
            row_indices(ids.get(), V)
            where = tuple(int(i) for i in np.unravel_index(first, ids.shape))
            raise IndexError(f"id at position {where} of ids {ids.shape} is out of range: "
                             f"expected a whole number in [0, {V})")

    def _rows_call(self, name, dst, src, ids, V, D, n_threads):
        ids_c, kind = self._ids(ids)
        bad = self.scratch(("bad_id",), (1,), np.int64)
        bad.set(np.array([ids.size], dtype=np.int64))
        storage = dst.storage
        if name == "take_rows":
            func = self.kernel("rows", f"nl_take_rows_{storage}_{kind}", "PPPqqqP")
        else:
            func = self.kernel("rows", f"nl_scatter_add_rows_{storage}_{kind}", "PPPqqqP")
        self.device.launch(func, (self.device.blocks(n_threads), 1), (256, 1, 1),
                           [dst.ptr, src.ptr, ids_c.ptr, ids.size, V, D, bad.ptr])
        self._check_ids(ids, bad, V)

    def take_rows(self, table, ids, out):
        check_table_rows("take_rows", ("table", table), ids, ("out", out))
        V, D = table.shape
        on_dense(self, "take_rows", lambda table, out: self._rows_call(
            "take_rows", out, table, ids, V, D, ids.size * D), out, table)

    def scatter_add_rows(self, grad_table, ids, rows):
        check_table_rows("scatter_add_rows", ("grad_table", grad_table), ids, ("rows", rows))
        V, D = grad_table.shape
        on_dense(self, "scatter_add_rows", lambda rows, grad_table: self._rows_call(
            "scatter_add_rows", grad_table, rows, ids, V, D, D * min(V, 64)), grad_table, rows)

    def permute_axes(self, x, out, axes):
        check_permute(x, out, axes)
        axes = [a % x.ndim for a in axes]
        swap_last = axes[:-2] == list(range(x.ndim - 2)) and axes[-2:] == [x.ndim - 1,
                                                                           x.ndim - 2]
        if swap_last and x.is_contiguous and out.is_contiguous and x.itemsize in (2, 4) \
                and x.storage == out.storage:
            R, C = x.shape[-2:]
            planes = x.size // max(1, R * C)
            func = self.kernel("transpose", f"nl_transpose_b{8 * x.itemsize}", "PPii")
            self.device.launch(func, (-(-C // 32), -(-R // 32), planes), (32, 8, 1),
                               [out.ptr, x.ptr, R, C])
            return
        out[:] = x.transpose(axes)
