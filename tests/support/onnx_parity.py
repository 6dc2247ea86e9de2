"""neonlite's ``predict`` against ONNX Runtime's CPU output of the exported model.

:func:`export_and_compare` exports an initialized model, runs the file in ONNX Runtime on
inputs of two batch sizes (neither the backend's batch size, so the dynamic batch axis is
exercised) and returns the largest difference relative to the largest output value.
:func:`randomize` gives every parameter and buffer (BatchNorm's running statistics included)
random values, so that no exporter passes by multiplying by ones or adding zeros.
"""
import numpy as np


def randomize(model, seed=0):
    """Random parameters and buffers: normal values, variances in [0.5, 1.5)."""
    rng = np.random.default_rng(seed)
    params = model.get_params()
    for name, value in params.items():
        if value.dtype.kind != "f":
            continue  # integer buffers (an Embedding's recorded characters) stay as they are
        if name.endswith("running_var"):
            params[name] = rng.uniform(0.5, 1.5, value.shape).astype(np.float32)
        else:
            params[name] = (rng.normal(size=value.shape) * 0.5).astype(np.float32)
    model.set_params(params)


def onnx_outputs(path, x, extra=None):
    """ONNX Runtime's CPU output of the model file ``path`` on the batch ``x`` (and the
    graph's further inputs, a name -> array dict ``extra``)."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options,
                                           providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    return session.run(None, {feed.name: x.astype(np.float32), **(extra or {})})[0]


def relative_difference(ours, theirs):
    """max |ours - theirs| / max |ours| (shapes must agree)."""
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    scale = max(float(np.max(np.abs(ours))), 1e-30)
    return float(np.max(np.abs(ours.astype(np.float64) - theirs))) / scale


def export_and_compare(model, path, inputs, opset=17, **options):
    """Export ``model`` to ``path`` (``options``: ``export_onnx``'s, e.g. ``fold_bn``) and
    return the largest relative difference between ``model.predict(x)`` and ONNX Runtime's
    output over each batch ``x`` of ``inputs``."""
    model.export_onnx(path, opset=opset, **options)
    return max(relative_difference(model.predict(x), onnx_outputs(path, x)) for x in inputs)


def export_and_compare_lengths(make_model, make_inputs, path, lengths, opset=17):
    """For sequence models: the model ``make_model(T)`` (initialized, random parameters) at the
    first of ``lengths`` is exported once; for each length T a model of the same parameters is
    built at T and its ``predict`` on ``make_inputs(T)`` (a list of batches) compared with ONNX
    Runtime on the one file.  Returns the largest relative difference."""
    first = make_model(lengths[0])
    first.export_onnx(path, opset=opset)
    worst = 0.0
    for T in lengths:
        model = make_model(T)
        model.set_params(first.get_params())
        for x in make_inputs(T):
            worst = max(worst, relative_difference(model.predict(x), onnx_outputs(path, x)))
    return worst
