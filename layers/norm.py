"""Batch normalization over the channel (last) axis."""
from ..initializers import Constant
from .layer import ParameterLayer, flat_rows


class BatchNorm(ParameterLayer):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta per channel (the last axis).

    Training uses the statistics of the batch (over N, H, W for NHWC images) and updates the
    running statistics as ``r = rho * r + (1 - rho) * batch_stat``; inference uses the running
    ones.  Parameters ``gamma``, ``beta`` (C,); buffers ``running_mean``, ``running_var`` (C,).
    """

    def __init__(self, rho=0.9, eps=1e-5, name=None):
        super().__init__(name)
        if not 0.0 <= rho < 1.0 or eps <= 0:
            raise ValueError(f"BatchNorm: need 0 <= rho < 1 and eps > 0, got rho={rho}, eps={eps}")
        self.rho, self.eps = float(rho), float(eps)

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
        if self.deltas is None:
            self.deltas = be.zeros((be.bsz,) + self.in_shape)

    def buffers(self):
        return {"running_mean": self.running_mean, "running_var": self.running_var}

    def _row(self, t):
        return t.reshape(1, self.C)

    def fprop(self, x, inference=False):
        self.be.batchnorm_fprop(flat_rows(x, self.C), self._row(self.gamma.value),
                                self._row(self.beta.value), flat_rows(self.outputs, self.C),
                                flat_rows(self.xhat, self.C), self.mean, self.invstd,
                                self._row(self.running_mean), self._row(self.running_var),
                                self.eps, self.rho, inference)
        return self.outputs

    def bprop(self, error):
        self.be.batchnorm_bprop(flat_rows(error, self.C), flat_rows(self.xhat, self.C),
                                self.invstd, self._row(self.gamma.value),
                                flat_rows(self.deltas, self.C),
                                self._row(self.gamma.grad), self._row(self.beta.grad))
        return self.deltas
