"""The example character transformer (examples/char_transformer.py) on real text: 500 steps of
the recipe on Tiny Shakespeare reach a validation loss <= 2.30 nats/char."""
import importlib.util
import time

import numpy as np
import pytest
from support.harness import CHECKOUT, data_dir

EXAMPLE = CHECKOUT / "examples" / "char_transformer.py"


def load_example():
    spec = importlib.util.spec_from_file_location("char_transformer_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_command_line(tmp_path, capsys):
    text = tmp_path / "tiny.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 30, encoding="utf-8")
    load_example().main(["--steps", "3", "-z", "4", "--seq-len", "16", "-n", "20",
                         "--data", str(text), "--prompt", "To be"])
    out = capsys.readouterr().out
    assert "validation loss" in out
    sample = out.split("bits/char)\n", 1)[1]
    assert sample.startswith("To be") and len(sample.rstrip("\n")) >= len("To be") + 20 - 5


@pytest.mark.slow
def test_char_transformer_learns_tiny_shakespeare():
    path = data_dir() / "text" / "tinyshakespeare.txt"
    if not path.is_file():
        pytest.skip(f"real data not found at {path} (set NEONLITE_TEST_DATA)")
    example = load_example()
    start = time.perf_counter()
    model, corpus, losses, valid = example.train(str(path), steps=500, seed=0)
    seconds = time.perf_counter() - start
    sample = model.generate("ROMEO:", 200, temperature=0.8, seed=0)
    print(f"\n500 steps in {seconds:.0f} s; validation loss {valid:.4f} nats/char")
    print("loss curve (mean of each 50 steps):",
          " ".join(f"{np.mean(losses[i:i + 50]):.3f}" for i in range(0, len(losses), 50)))
    print("sample:\nROMEO:" + sample)
    assert len(losses) == 500 and np.isfinite(losses).all()
    assert np.mean(losses[-50:]) < np.mean(losses[:50]) - 1.0
    assert valid <= 2.30, f"validation loss {valid:.4f} nats/char after 500 steps (want <= 2.30)"
    assert len(sample) == 200 and set(sample) <= set(corpus.vocab.chars)
