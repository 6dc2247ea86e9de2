"""Batch normalization over the channel (last) axis."""
import numpy as np

from ..initializers import Constant
from ..transforms.activation import is_plain_relu
from .layer import ParameterLayer, flat_rows


class BatchNorm(ParameterLayer):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta per channel (the last axis).

    Training uses the statistics of the batch (over N, H, W for NHWC images) and updates the
    running statistics as ``r = rho * r + (1 - rho) * batch_stat``; inference uses the running
    ones.  Parameters ``gamma``, ``beta`` (C,); buffers ``running_mean``, ``running_var`` (C,).

    ``stat_sync`` (None by default) is the hook of synchronised batch norm in data-parallel
    training: an object whose ``allreduce_sum(values)`` returns the sum of a small float64
    host array over every process.  When set, training statistics (and the sums bprop needs)
    cover the examples of every process, as one process with the global batch would.

    ``activation``: a plain ReLU (``Rectlin()``) applied in the same passes as the batch norm
    (fprop writes max(y, 0); bprop masks the error by y > 0), as ``Conv``/``Affine`` with
    ``batch_norm=True`` do for their activation when :meth:`fuses` it.
    """

    def __init__(self, rho=0.9, eps=1e-5, name=None, activation=None):
        super().__init__(name)
        if not 0.0 <= rho < 1.0 or eps <= 0:
            raise ValueError(f"BatchNorm: need 0 <= rho < 1 and eps > 0, got rho={rho}, eps={eps}")
        if activation is not None and not self.fuses(activation):
            raise ValueError(f"BatchNorm: activation must be a plain ReLU (Rectlin with slope 0) "
                             f"to fuse into batch norm, got {activation!r}")
        self.rho, self.eps = float(rho), float(eps)
        self.activation = activation
        self.stat_sync = None
        self._masked = None

    @staticmethod
    def fuses(transform):
        """True for an activation batch norm applies in its own passes (a plain ReLU)."""
        return is_plain_relu(transform)

    def param_shapes(self):
        C = self.in_shape[-1]
        return [(C,), (C,)]

    def allocate(self):
        super().allocate()
        C = self.in_shape[-1]
        self.C = C
        self.gamma = self.add_param("gamma", (C,), Constant(1.0), C, C)
        self.beta = self.add_param("beta", (C,), Constant(0.0), C, C)
        be = self.be
        self.running_mean = be.zeros((C,))
        self.running_var = be.ones((C,))
        self.mean, self.invstd = be.zeros((1, C)), be.zeros((1, C))
        self.xhat = be.zeros((be.bsz,) + self.in_shape)
        self._scratch_a, self._scratch_b = be.zeros((1, C)), be.zeros((1, C))
        if self.deltas is None:
            self.deltas = be.zeros((be.bsz,) + self.in_shape)

    def buffers(self):
        return {"running_mean": self.running_mean, "running_var": self.running_var}

    def _row(self, t):
        return t.reshape(1, self.C)

    def fprop(self, x, inference=False):
        if self.stat_sync is not None and not inference:
            return self._fprop_synced(flat_rows(x, self.C))
        self.be.batchnorm_fprop(flat_rows(x, self.C), self._row(self.gamma.value),
                                self._row(self.beta.value), flat_rows(self.outputs, self.C),
                                flat_rows(self.xhat, self.C), self.mean, self.invstd,
                                self._row(self.running_mean), self._row(self.running_var),
                                self.eps, self.rho, inference, relu=self.activation is not None)
        return self.outputs

    def bprop(self, error):
        if self.stat_sync is not None:
            return self._bprop_synced(flat_rows(error, self.C))
        self.be.batchnorm_bprop(flat_rows(error, self.C), flat_rows(self.xhat, self.C),
                                self.invstd, self._row(self.gamma.value),
                                flat_rows(self.deltas, self.C),
                                self._row(self.gamma.grad), self._row(self.beta.grad),
                                y=None if self.activation is None else flat_rows(self.outputs,
                                                                                 self.C))
        return self.deltas

    # ---- synchronised statistics (stat_sync set) -----------------------------------------------
    def _fprop_synced(self, x):
        """Normalize x (M, C) with the mean and biased variance of every process's rows: the
        backend gives this process's moments (float64), the processes combine them
        (``stat_sync.combine_moments``), and mean and invstd are rounded once from the float64
        result, as the one-process kernel rounds them, so both normalize with the same float32
        values; the running averages follow on the device."""
        be, C = self.be, self.C
        gamma, beta = self._row(self.gamma.value), self._row(self.beta.value)
        y, xhat = flat_rows(self.outputs, C), flat_rows(self.xhat, C)
        count, mean, m2 = self.stat_sync.combine_moments(x.shape[0], *be.batchnorm_moments(x))
        self._count = count
        var = m2 / count
        self.mean.set(mean.reshape(1, C))
        self.invstd.set((1.0 / np.sqrt(var + self.eps)).reshape(1, C))
        be.batchnorm_apply(x, gamma, beta, y, xhat, self.mean, self.invstd,
                           relu=self.activation is not None)
        var_row = self._scratch_b
        var_row.set(var.reshape(1, C))
        unbiased = count / max(count - 1.0, 1.0)
        for running, stat, factor in ((self.running_mean, self.mean, 1.0),
                                      (self.running_var, var_row, unbiased)):
            row = self._row(running)
            row[:] = row * self.rho + stat * ((1.0 - self.rho) * factor)
        return self.outputs

    def _bprop_synced(self, dy):
        """dx = gamma * invstd * (dy - sum(dy) / M - xhat * sum(dy * xhat) / M) with the sums
        and M over every process; gamma's and beta's gradients from this process's rows (the
        backend's kernel gives the sums)."""
        C, xhat = self.C, flat_rows(self.xhat, self.C)
        gamma, dx = self._row(self.gamma.value), flat_rows(self.deltas, C)
        if self.activation is not None:
            if self._masked is None:
                self._masked = self.be.zeros(self.deltas.shape)
            masked = flat_rows(self._masked, C)
            masked[:] = dy * (flat_rows(self.outputs, C) > 0.0)
            dy = masked
        dg, db = self._scratch_a, self._scratch_b
        dg.fill(0.0)
        db.fill(0.0)
        self.be.batchnorm_bprop(dy, xhat, self.invstd, gamma, dx, dg, db)
        for grad, local in ((self.gamma.grad, dg), (self.beta.grad, db)):
            row = self._row(grad)
            row[:] = row + local
        total = self.stat_sync.allreduce_sum(np.concatenate(
            [db.get().reshape(-1), dg.get().reshape(-1)])) / self._count
        db.set(total[:C].reshape(1, C))
        dg.set(total[C:].reshape(1, C))
        dx[:] = (gamma * self.invstd) * (dy - db - xhat * dg)
        return self.deltas
