"""A small ``neonlite train`` run for the CLI tests: 2 epochs of 64 procedural 8x8 RGB shapes
(4 classes, 32 held out) in batches of 16, through Conv 3x3x4 + ReLU, 2x2 max pooling and an
Affine softmax of 4 (372 parameters)."""

RUN = """\
epochs: 2
batchsize: 16
rng_seed: 0
dataset: {type: shapes, config: {n: 64, size: 8, classes: 4, nvalid: 32}}
layers:
  - {type: Conv, config: {fshape: [3, 3, 4], padding: 1, activation: {type: Rectlin}}}
  - {type: Pooling, config: {fshape: 2}}
  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}
cost: CrossEntropyMulti
optimizer: {type: GradientDescentMomentum, config: {learning_rate: 0.1, momentum_coef: 0.9}}
"""


def shapes_run(folder):
    """The path (a str) of the run's YAML, written as ``run.yaml`` in ``folder``."""
    path = folder / "run.yaml"
    path.write_text(RUN)
    return str(path)
