"""Token ids from the text iterators (``TextWindows``, ``SequenceIterator``) are int32 on every
backend data type: a bfloat16 backend numbers whole numbers exactly only up to 256 and float16
up to 2048, so ids stored in the backend's float type would refuse (or round) a larger
vocabulary."""
import numpy as np
import pytest

import neonlite
from neonlite.data import SequenceIterator, TextWindows
from neonlite.layers import Embedding
from support.requires import requires

pytestmark = requires("compiler")

VOCAB = 1000


def _picked(ids):
    """The ids an Embedding of ``VOCAB`` rows picks for ``ids`` (N, T): row r holds r % 256 and
    r // 256, whole numbers every data type holds exactly."""
    layer = Embedding(VOCAB, 2)
    layer.configure((ids.shape[1],))
    layer.allocate()
    rows = np.arange(VOCAB)
    layer.W.value[:] = np.stack([rows % 256, rows // 256], axis=1).astype(np.float32)
    out = layer.fprop(ids).get().astype(np.int64)
    return out[..., 0] + 256 * out[..., 1]


@pytest.mark.parametrize("datatype", ["float32", "float16", "bfloat16"])
def test_text_windows_give_int32_ids_that_pick_their_rows(datatype):
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=datatype,
                              **({"numpy_float16": True} if datatype == "float16" else {}))
    ids = np.arange(VOCAB - 40, VOCAB).repeat(3) % VOCAB
    x, t = next(iter(TextWindows(ids, VOCAB, seq_len=8)))
    assert x.dtype == np.int32 and t.dtype == np.int32
    got = x.get()
    assert got.min() >= VOCAB - 40
    np.testing.assert_array_equal(_picked(x), got)


@pytest.mark.parametrize("datatype", ["float32", "bfloat16"])
def test_sequence_batches_give_int32_ids(datatype):
    neonlite.gen_backend("cpu", batch_size=2, rng_seed=0, datatype=datatype)
    seqs = [np.array([999, 998, 997, 5]), np.array([700, 301, 999])]
    x, _ = next(iter(SequenceIterator(seqs, max_len=4, shuffle=False)))
    x = x[0] if isinstance(x, tuple) else x
    assert x.dtype == np.int32
    assert set(x.get().ravel()) >= {999, 998, 997, 700, 301}
