"""Weight initializers.  Each draws from the backend's seeded host RNG (``be.rng``), so the
same seed gives the same weights on every backend.

``generate(rng, shape, fan_in, fan_out)`` returns a float64 host array of ``shape``; layers
state their fans (Linear W (nin, nout): fan_in=nin, fan_out=nout; Conv W (R, S, C, K):
fan_in=R*S*C, fan_out=R*S*K).
"""
import numpy as np


class Initializer:
    def generate(self, rng, shape, fan_in, fan_out):
        raise NotImplementedError

    def get_description(self):
        return {"type": type(self).__name__, "config": dict(self._config())}

    def _config(self):
        return {}


class Constant(Initializer):
    """Every element equal to ``val``."""

    def __init__(self, val=0.0):
        self.val = float(val)

    def generate(self, rng, shape, fan_in, fan_out):
        return np.full(shape, self.val)

    def _config(self):
        return {"val": self.val}


class Uniform(Initializer):
    """U(low, high)."""

    def __init__(self, low=-0.1, high=0.1):
        if not low < high:
            raise ValueError(f"Uniform needs low < high, got low={low}, high={high}")
        self.low, self.high = float(low), float(high)

    def generate(self, rng, shape, fan_in, fan_out):
        return rng.uniform(self.low, self.high, size=shape)

    def _config(self):
        return {"low": self.low, "high": self.high}


class Gaussian(Initializer):
    """N(loc, scale^2)."""

    def __init__(self, loc=0.0, scale=1.0):
        if scale < 0:
            raise ValueError(f"Gaussian needs scale >= 0, got {scale}")
        self.loc, self.scale = float(loc), float(scale)

    def generate(self, rng, shape, fan_in, fan_out):
        return rng.normal(self.loc, self.scale, size=shape)

    def _config(self):
        return {"loc": self.loc, "scale": self.scale}


class GlorotUniform(Initializer):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010)."""

    def __init__(self, gain=1.0):
        self.gain = float(gain)

    def generate(self, rng, shape, fan_in, fan_out):
        bound = self.gain * np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-bound, bound, size=shape)

    def _config(self):
        return {"gain": self.gain}


class Kaiming(Initializer):
    """N(0, 2 / fan_in) (He et al. 2015), the ReLU-preserving scale."""

    def __init__(self, gain=np.sqrt(2.0)):
        self.gain = float(gain)

    def generate(self, rng, shape, fan_in, fan_out):
        return rng.normal(0.0, self.gain / np.sqrt(fan_in), size=shape)

    def _config(self):
        return {"gain": self.gain}
