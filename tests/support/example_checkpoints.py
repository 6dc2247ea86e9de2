"""Checkpoints of two examples trained one batch each, for the tests of the commands that read
a checkpoint (``neonlite eval``, ``neonlite generate``): a character language model
(``examples/char_transformer.yaml``, batch 2) and an image classifier
(``examples/shapes_cnn.yaml``)."""
import neonlite
from neonlite.cli import main
from support.harness import CHECKOUT

EXAMPLES = CHECKOUT / "examples"


def example_checkpoints(root):
    """(lm, cnn): the paths of the two checkpoints, written under folder ``root``; the current
    backend is left as it was."""
    previous = neonlite.backends._current
    lm, cnn = root / "lm.h5", root / "cnn.h5"
    assert main(["train", str(EXAMPLES / "char_transformer.yaml"), "-e", "1", "--max-batches",
                 "1", "-z", "2", "-q", "--eval-freq", "0", "--save-path", str(lm)]) == 0
    assert main(["train", str(EXAMPLES / "shapes_cnn.yaml"), "-e", "1", "--max-batches", "1",
                 "-q", "--eval-freq", "0", "--save-path", str(cnn)]) == 0
    neonlite.backends._current = previous
    return lm, cnn
