"""neonlite's inference beside ONNX Runtime's on the same exported model: ``python -m
benchmarks.onnx_predict [--repeats N] [--smoke]``.

Two models: the LeNet of ``workloads/lenet.py`` (28x28x1 images, batch 128) and the
char-transformer of ``examples/char_transformer.py`` (4 pre-norm blocks, d=128, 4 heads,
vocabulary 103, T=128, batch 32).  Each is built with random weights, exported with
``Model.export_onnx`` and timed alternating call by call after warm-up (medians): neonlite's
``fprop(x, inference=True)`` on the CPU backend against ONNX Runtime's CPU provider
(``InferenceSession.run``, its default threads) on the same batch.  The ratio is
neonlite / ONNX Runtime time (> 1: ONNX Runtime is faster).  Needs ``onnx`` and
``onnxruntime``.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from .timing import time_alternating
from .workloads.lenet import lenet_model


def char_transformer(T, d=128, blocks=4, vocab=103):
    from neonlite import Model
    from neonlite.data import ArrayIterator
    from neonlite.layers import Affine, Embedding, LayerNorm, PositionalEmbedding, TransformerBlock
    from neonlite.transforms import Softmax
    layers = [Embedding(vocab, d, name="embed"), PositionalEmbedding(T, d, name="pos")]
    layers += [TransformerBlock(d, 4, name=f"block{i}") for i in range(blocks)]
    layers += [LayerNorm(name="ln_f"), Affine(vocab, activation=Softmax(), name="head")]
    model = Model(layers, name="char_transformer")
    model.initialize(ArrayIterator(np.zeros((1, T), np.float32), shuffle=False))
    return model, np.random.default_rng(0).integers(0, vocab, (model.be.bsz, T))


def rows(smoke):
    """(name, batch, make() -> (model, host batch))."""
    from neonlite import gen_backend

    def lenet(batch):
        def make():
            gen_backend("cpu", batch_size=batch, rng_seed=0)
            return lenet_model(), np.random.default_rng(0).random((batch, 28, 28, 1))
        return make

    def transformer(batch, T):
        def make():
            gen_backend("cpu", batch_size=batch, rng_seed=0)
            return char_transformer(T)
        return make
    if smoke:
        return [("lenet_predict", 4, lenet(4)),
                ("char_transformer_predict", 2, transformer(2, 16))]
    return [("lenet_predict", 128, lenet(128)),
            ("char_transformer_predict", 32, transformer(32, 128))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 2 repeats")
    args = parser.parse_args(argv)
    import onnxruntime
    repeats = 2 if args.smoke else args.repeats
    print(f"{'workload':26} {'batch':>5} {'neonlite ms':>12} {'onnxruntime ms':>15} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as folder:
        for name, batch, make in rows(args.smoke):
            model, host = make()
            host = host.astype(np.float32)
            path = Path(folder) / f"{name}.onnx"
            model.export_onnx(path)
            session = onnxruntime.InferenceSession(str(path),
                                                   providers=["CPUExecutionProvider"])
            feed = {session.get_inputs()[0].name: host}
            x = model.be.array(host)
            times = time_alternating({
                "neonlite": lambda: model.layers.fprop(x, inference=True).get(),
                "onnxruntime": lambda: session.run(None, feed)}, repeats)
            ours, theirs = times["neonlite"] * 1e3, times["onnxruntime"] * 1e3
            print(f"{name:26} {batch:>5} {ours:>12.2f} {theirs:>15.2f} {ours / theirs:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
