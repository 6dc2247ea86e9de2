"""Rows of a table, bias rows and axis permutations on the CPU (``Backend.take_rows``,
``scatter_add_rows``, ``permute_axes``; op-trees adding a bias row): the backend's ops
(:class:`CPURowOps`: the ids as int64 row numbers in kept buffers, checked once) and their
calls of ``kernels/cpu/rows.c`` (module functions on numpy arrays), which run the numpy
reference where the kernels do not take the case."""
import numpy as np

from ..operand_shapes import check_permute, check_table_rows
from ..reference import rows as reference
from ..shared.bfloat16 import is_bf16
from .build import FLOATS, address, pointer


def take_rows_kernel(kernels, table, idx, out):
    """out (..., D) = table (V, D)[idx] for checked int64 row numbers idx (n,), by the C
    kernels of ``kernels`` (a :class:`~neonlite.backends.cpu.build.KernelModules`); False
    where they do not take the arrays."""
    module = kernels.usable("rows", table, out)
    if module is None or idx.dtype != np.int64 or out.size != idx.size * table.shape[1]:
        return False
    ffi = module.ffi
    module.lib.take_rows(ffi.from_buffer("real[]", table), ffi.from_buffer("int64_t[]", idx),
                         ffi.from_buffer("real[]", out), idx.size, table.shape[1])
    return True


def scatter_add_rows_kernel(kernels, grad_table, idx, rows):
    """grad_table (V, D)[idx[i]] += rows (..., D)[i] in order, for checked int64 idx (n,);
    False where the kernels do not take the arrays."""
    module = kernels.usable("rows", grad_table, rows)
    if module is None or idx.dtype != np.int64 or rows.size != idx.size * grad_table.shape[1]:
        return False
    ffi = module.ffi
    module.lib.scatter_add_rows(ffi.from_buffer("real[]", grad_table),
                                ffi.from_buffer("int64_t[]", idx),
                                ffi.from_buffer("real[]", rows), idx.size, grad_table.shape[1])
    return True


def add_row_kernel(kernels, x, row, out, keep=False):
    """out (..., C) = x + row for C-contiguous arrays of one float type, row of out's trailing
    shape (a bias (C,), a positional block (T, D)) broadcast over the leading axes; x of out's
    shape, out itself or apart from it; row apart from out.  ``keep``: see
    ``KernelModules.run_call``.  False where the kernels do not take the arrays."""
    return kernels.run_call("add_row", (x, row, out), None, keep,
                            lambda: _add_row_call(kernels, x, row, out))


def _add_row_call(kernels, x, row, out):
    bf16 = is_bf16(out.dtype)
    if (x.shape != out.shape or row.ndim == 0 or row.ndim > out.ndim
            or out.shape[out.ndim - row.ndim:] != row.shape or x.dtype != out.dtype
            or row.dtype != out.dtype or (out.dtype not in FLOATS and not bf16)
            or not (out.flags.c_contiguous and x.flags.c_contiguous
                    and row.flags.c_contiguous and out.flags.writeable)
            or np.may_share_memory(row, out)
            or (np.may_share_memory(x, out) and address(x) != address(out))):
        return None
    module = kernels.module("rows", FLOATS[0] if bf16 else out.dtype)
    if module is None:
        return None
    ffi = module.ffi
    if bf16:
        return module.lib.add_row_bf16, tuple(ffi.cast("uint16_t *", address(a))
                                              for a in (x, row, out)) + (
            out.size // max(row.size, 1), row.size)
    return module.lib.add_row, (pointer(ffi, x), pointer(ffi, row), pointer(ffi, out),
                                out.size // max(row.size, 1), row.size)


def scatter_add_rows_bf16_kernel(kernels, grad_table, idx, rows):
    """grad_table (V, D)[idx[i]] += rows (..., D)[i] on C-contiguous bf16 bit arrays for checked
    int64 idx (n,): each id's rows summed in float32 in order into its widened row, rounded
    once (``scatter_add_rows_bf16``: the widening path's bits, without widening the table);
    False where the kernels do not take the arrays."""
    module = kernels.module("rows", FLOATS[0])
    if (module is None or idx.dtype != np.int64 or not grad_table.flags.c_contiguous
            or not rows.flags.c_contiguous or rows.size != idx.size * grad_table.shape[1]):
        return False
    ffi, n, V = module.ffi, idx.size, grad_table.shape[0]
    size = int(module.lib.scatter_add_rows_bf16_work_size(n, V))
    work = kernels.workspaces.get(("scatter_add_rows_bf16",))
    if work is None or work.size < size:
        work = kernels.workspaces[("scatter_add_rows_bf16",)] = np.empty(size, np.int64)
    module.lib.scatter_add_rows_bf16(ffi.cast("uint16_t *", address(grad_table)),
                                     ffi.from_buffer("int64_t[]", idx),
                                     ffi.cast("uint16_t *", address(rows)),
                                     ffi.from_buffer("int64_t[]", work), n, grad_table.shape[1],
                                     V)
    return True


#: the name a one-row bf16 product's kept call has (``KernelModules.run_call``)
ROW_COMBINATION = "row_combination_bf16"


def row_combination_bf16_kernel(kernels, w, b, c, alpha, beta, keep=False):
    """c (1, K) = alpha * w (1, M) @ b (M, K) + beta * c on bf16 bit arrays (b's rows
    unit-stride, w and c contiguous): a one-row product (a bias gradient ones @ dY) as a
    weighted sum of b's rows in one pass over its bits (``row_combination_bf16``); False where
    the kernels do not take the arrays.  ``keep``: see ``KernelModules.run_call`` (the bias
    gradient's call is prepared once)."""
    return kernels.run_call(ROW_COMBINATION, (w, b, c), (float(alpha), float(beta)),
                            keep, lambda: _row_combination_call(kernels, w, b, c, alpha, beta))


def _row_combination_call(kernels, w, b, c, alpha, beta):
    module = kernels.module("rows", FLOATS[0])
    M, K = b.shape
    if (module is None or w.shape != (1, M) or c.shape != (1, K) or not c.flags.c_contiguous
            or not w.flags.c_contiguous or b.strides[1] != b.itemsize
            or b.strides[0] % b.itemsize or np.may_share_memory(c, b)):
        return None
    ffi = module.ffi
    return module.lib.row_combination_bf16, tuple(
        ffi.cast("uint16_t *", address(a)) for a in (w, b)) + (
        b.strides[0] // b.itemsize, M, K, float(alpha), float(beta),
        ffi.cast("uint16_t *", address(c)))


def permute_axes_kernel(kernels, x, out, axes):
    """out = numpy.transpose(x, axes) for 4-D arrays whose last axis stays last and is
    contiguous in both (either may be a strided view): the row copies of ``copy_rows``; False
    where the kernels do not take the arrays."""
    axes = tuple(int(a) for a in axes)
    if (x.ndim != 4 or out.ndim != 4 or axes[3:] != (3,) or x.dtype != out.dtype
            or x.dtype not in FLOATS or x.strides[3] != x.itemsize
            or out.strides[3] != out.itemsize or not out.flags.writeable
            or any(x.shape[a] != out.shape[i] for i, a in enumerate(axes))
            or any(s < 0 or s % x.itemsize for s in x.strides + out.strides)
            or np.may_share_memory(x, out)):
        return False
    module = kernels.module("rows", x.dtype)
    if module is None:
        return False
    ffi, it = module.ffi, x.itemsize
    src = [x.strides[a] // it for a in axes[:3]]
    dst = [s // it for s in out.strides[:3]]
    module.lib.copy_rows(ffi.cast("real *", address(x)), *src,
                         ffi.cast("real *", address(out)), *dst, *out.shape)
    return True


class CPURowOps:
    """The row and layout ops of the CPU backend."""

    def take_rows(self, table, ids, out):
        check_table_rows("take_rows", ("table", table), ids, ("out", out))
        idx = self._row_indices(ids._ary, table.shape[0])
        if not take_rows_kernel(self.kernels, table._ary, idx, out._ary):
            reference.take_rows(table._ary, ids._ary, out._ary)

    def scatter_add_rows(self, grad_table, ids, rows):
        check_table_rows("scatter_add_rows", ("grad_table", grad_table), ids, ("rows", rows))
        idx = self._row_indices(ids._ary, grad_table.shape[0])
        if not scatter_add_rows_kernel(self.kernels, grad_table._ary, idx, rows._ary):
            reference.scatter_add_rows(grad_table._ary, ids._ary, rows._ary)

    def _row_indices(self, ids, nrows):
        """``ids`` (ndarray of any shape S: integers, or floats holding whole numbers) as the
        int64 row numbers (n,) = ids.reshape(-1) that ``reference.row_indices`` gives, checked
        to lie in [0, nrows), but written into buffers kept per dtype (the first elements of
        the largest met, viewed as S), so an embedding's
        look-up and gradient allocate nothing from the second step on.  The result is valid
        until the next call.  A bad id raises ``row_indices``'s IndexError, which names it."""
        key = ids.dtype
        found = self._row_scratch.get(key)
        if found is None or found[0].size < ids.size:
            whole = ids.dtype.kind == "f"  # floats must be whole numbers: trunc(ids) == ids
            found = self._row_scratch[key] = (
                np.empty(ids.size, np.int64),
                np.empty(ids.size, ids.dtype) if whole else None,
                np.empty(ids.size, np.bool_) if whole else None)
        idx, truncated, same = (None if a is None else a[:ids.size].reshape(ids.shape)
                                for a in found)
        np.copyto(idx, ids, casting="unsafe")  # the cast of ids.astype(np.intp)
        ok = idx.size == 0 or (idx.min() >= 0 and idx.max() < nrows)
        if ok and truncated is not None:
            np.trunc(ids, out=truncated)
            ok = np.equal(truncated, ids, out=same).all()
        if not ok:
            return reference.row_indices(ids, nrows).reshape(-1)  # raises, naming the id
        return idx.reshape(-1)

    def _add_row_into(self, out, tree, keep=False):
        """out (ndarray)[...] = the op-tree ``a + row`` (either order) of tensors, row a bias
        broadcast over a's leading axes, by ``add_row`` (the sums are those of the op-tree
        machine, one addition each); False when the tree is not of that shape or the kernel
        does not take its arrays.  ``keep``: out is a kept tensor's own array."""
        if tree.op != "add" or len(tree.args) != 2:
            return False
        a, b = tree.args
        x, row = getattr(a, "_ary", None), getattr(b, "_ary", None)
        if x is None or row is None:
            return False
        if x.size < row.size:
            x, row = row, x
        return row.size < out.size and add_row_kernel(
            self.kernels, x, row, out, keep=keep and a.kept and b.kept)

    def permute_axes(self, x, out, axes):
        check_permute(x, out, axes)
        if not permute_axes_kernel(self.kernels, x._ary, out._ary, axes):
            np.copyto(out._ary, np.transpose(x._ary, axes))
