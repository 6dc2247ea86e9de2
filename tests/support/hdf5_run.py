"""A one-layer ``neonlite train`` run on HDF5 files for the attack tests: ``run_yaml`` is its
YAML (1 epoch in batches of 8 through an Affine softmax of 4 classes, reading ``data.h5`` and
the validation file ``valid`` names), ``write_hdf5`` writes such a file: ``x`` (rows, features)
float32 normal values and ``y`` (rows,) class indices in [0, 4)."""
import h5py
import numpy as np

#: the optimizer the run trains with unless asked for another
SGD = "{type: GradientDescentMomentum, config: {learning_rate: 0.1}}"


def run_yaml(optimizer=SGD, valid="valid.h5"):
    """The run's YAML text."""
    return f"""\
epochs: 1
batchsize: 8
rng_seed: 0
dataset: {{type: hdf5, config: {{train: data.h5, valid: {valid}, nclass: 4}}}}
layers:
  - {{type: Affine, config: {{nout: 4, activation: {{type: Softmax}}}}}}
cost: CrossEntropyMulti
optimizer: {optimizer}
"""


def write_hdf5(path, features=6, rows=32):
    """Write ``rows`` examples of ``features`` values (seed 0) to HDF5 file ``path``."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["x"] = rng.standard_normal((rows, features)).astype(np.float32)
        f["y"] = rng.integers(0, 4, rows)
