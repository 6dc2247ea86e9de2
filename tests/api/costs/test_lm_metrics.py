"""The language-model metrics (``NatsPerToken``, ``BitsPerCharacter``, ``Perplexity``) against
their definitions on (N, K) probabilities and one-hot targets, and through ``Model.eval`` of a
tiny trained character model (perplexity = exp(nats), bits = nats / ln 2)."""
import math

import numpy as np
import pytest
from support.tiny_lm import trained_tiny_lm, write_text_file

from neonlite.transforms import BitsPerCharacter, NatsPerToken, Perplexity


@pytest.fixture
def text_file(tmp_path):
    return write_text_file(tmp_path)


def test_lm_metrics():
    y = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])
    t = np.array([[1, 0, 0], [0, 0, 1]])
    nats = -np.log([0.5, 0.8])
    np.testing.assert_allclose(NatsPerToken()(y, t), nats)
    np.testing.assert_allclose(BitsPerCharacter()(y, t), nats / math.log(2))
    np.testing.assert_allclose(Perplexity().aggregate(nats.mean()), math.exp(nats.mean()))


def test_model_eval_reports_perplexity_as_exp_of_nats(text_file):
    model, corpus = trained_tiny_lm(text_file, dtype=np.float32, steps=2)
    nats = model.eval(corpus.valid_iter, NatsPerToken())
    np.testing.assert_allclose(model.eval(corpus.valid_iter, Perplexity()), math.exp(nats),
                               rtol=1e-9)
    np.testing.assert_allclose(model.eval(corpus.valid_iter, BitsPerCharacter()),
                               nats / math.log(2), rtol=1e-9)
    assert 0.5 < nats < 2 * math.log(len(corpus.vocab))
