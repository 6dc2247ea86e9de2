"""The block-sparse character transformer (examples/blocksparse_transformer.yaml and its Python
twin): the two describe the same model, the YAML trains through ``neonlite train`` and a
checkpoint stores the layouts (not the tables) and generates text, and (slow) 500 steps on Tiny
Shakespeare meet the dense example's learning bar."""
import importlib.util
import time
from types import SimpleNamespace

import numpy as np
import pytest
from support.harness import CHECKOUT, data_dir

from neonlite import gen_backend
from neonlite.cli import main
from neonlite.config.run import RunConfig
from neonlite.config.yaml_io import dump_yaml
from neonlite.generation import generate
from neonlite.layers import BlockSparseAttention, BlockSparseLinear
from neonlite.model import Model
from neonlite.serialize import read_checkpoint
from neonlite.training_log import read_log

EXAMPLES = CHECKOUT / "examples"
#: the validation loss (nats/char) that tests/examples/test_transformer_shakespeare.py requires of the
#: dense example after the same 500 steps
DENSE_BAR = 2.30


def load_example():
    spec = importlib.util.spec_from_file_location("blocksparse_transformer_example",
                                                  EXAMPLES / "blocksparse_transformer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_python_twin_describes_the_yaml_model():
    """The YAML's network (its ``vocab: auto`` sized, as a run sizes it, by a 103-character
    text) is the Python twin's."""
    run = RunConfig.from_file(EXAMPLES / "blocksparse_transformer.yaml")
    run.size_layers(SimpleNamespace(vocab="x" * 103, name="a 103-character text"))
    yaml = run.description()
    python = load_example().build_model(103).get_description()
    assert python["layers"] == yaml["layers"]
    again = RunConfig.from_text(dump_yaml(yaml), "again").description()
    assert again == yaml


def test_yaml_trains_and_checkpoint_generates(tmp_path):
    ckpt, log = tmp_path / "lm.h5", tmp_path / "log.h5"
    assert main(["train", str(EXAMPLES / "blocksparse_transformer.yaml"), "-e", "1",
                 "--max-batches", "2", "-q", "-z", "2", "-o", str(log), "--save-path",
                 str(ckpt)]) == 0
    data = read_log(log)
    assert data["complete"] and np.all(np.isfinite(data["batch"]["cost"]))
    checkpoint = read_checkpoint(ckpt)
    block = checkpoint.config["layers"][2]["config"]
    assert block["attention"]["config"]["layout"] == {
        "local": {"window": 2, "causal": True}, "strided": {"stride": 4, "causal": True}}
    assert block["fc1"]["config"]["layout"] == {"balanced": {"density": 0.25, "seed": 0}}
    assert checkpoint.params["block0.fc1.W"].shape == (64, 16, 16)  # 25% of 8 x 32 blocks
    assert not any("ptr" in name for name in checkpoint.params), "tables are not stored"
    gen_backend("cpu", batch_size=2, rng_seed=0)
    model = Model.load(str(ckpt))
    layers = [leaf for leaf in model.layers.leaves()]
    assert sum(isinstance(x, BlockSparseAttention) for x in layers) == 4
    assert sum(isinstance(x, BlockSparseLinear) for x in layers) == 8
    text = model.generate("The ", 20, temperature=0.8, seed=0)
    assert len(text) == 20


def test_cached_decoding_matches_full_recompute(tmp_path):
    """Incremental decoding over the layout (key/value cache + the layout's key mask) writes
    the same text as rerunning the training forward on the whole context."""
    text = tmp_path / "tiny.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 30, encoding="utf-8")
    model, corpus, _, _ = load_example().train(str(text), steps=3, batch_size=4, seq_len=64,
                                               d=32, heads=2, blocks=2, log_every=100)
    kw = dict(prompt="To be", n=90, temperature=0.8, seed=3)
    cached = generate(model, corpus, use_cache=True, **kw)
    assert cached == generate(model, corpus, use_cache=False, **kw)
    assert len(cached) == 90


def test_example_command_line(tmp_path, capsys):
    text = tmp_path / "tiny.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 30, encoding="utf-8")
    load_example().main(["--steps", "3", "-z", "4", "--seq-len", "32", "-n", "20",
                         "--data", str(text), "--prompt", "To be"])
    out = capsys.readouterr().out
    assert "validation loss" in out


@pytest.mark.slow
def test_blocksparse_transformer_learns_tiny_shakespeare():
    path = data_dir() / "text" / "tinyshakespeare.txt"
    if not path.is_file():
        pytest.skip(f"real data not found at {path} (set NEONLITE_TEST_DATA)")
    example = load_example()
    start = time.perf_counter()
    model, corpus, losses, valid = example.train(str(path), steps=500, seed=0)
    seconds = time.perf_counter() - start
    print(f"\n500 steps in {seconds:.0f} s; validation loss {valid:.4f} nats/char")
    print("loss curve (mean of each 50 steps):",
          " ".join(f"{np.mean(losses[i:i + 50]):.3f}" for i in range(0, len(losses), 50)))
    print("sample:\nROMEO:" + model.generate("ROMEO:", 200, temperature=0.8, seed=0))
    assert len(losses) == 500 and np.isfinite(losses).all()
    assert np.mean(losses[-50:]) < np.mean(losses[:50]) - 1.0
    assert valid <= DENSE_BAR, (f"validation loss {valid:.4f} nats/char after 500 steps; the "
                                f"dense example's bar is {DENSE_BAR}")
