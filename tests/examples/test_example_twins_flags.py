"""Every Python twin in examples/ takes ``neonlite train``'s flags with their meanings
(``-e`` epochs, ``--max-batches``, ``-z``, ``-o``, ...) and, given the same flags as its YAML,
trains the same run: the per-batch costs of the two training logs are identical."""
import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from support.harness import CHECKOUT

import neonlite
from neonlite.cli import main
from neonlite.cli.example import example_main
from neonlite.training_log import read_log

ROOT = CHECKOUT
EXAMPLES = ROOT / "examples"
TWINS = sorted(p.stem for p in EXAMPLES.glob("*.py") if (EXAMPLES / f"{p.stem}.yaml").is_file())


@pytest.fixture(autouse=True)
def keep_backend():
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


def load(name):
    spec = importlib.util.spec_from_file_location(f"twin_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_twin(name, argv):
    module = load(name)
    if hasattr(module, "main"):
        return module.main(argv)
    return example_main(module.network, module.SETTINGS, argv=argv, source=name)


def data_flags(name, request):
    if name.startswith("mnist"):
        return ["--data-dir", str(request.getfixturevalue("mnist_dir")), "-z", "8"]
    if name.startswith("cifar10"):
        return ["--data-dir", str(request.getfixturevalue("cifar_dir")), "-z", "4"]
    if name.endswith("transformer") or name.startswith("gpt"):
        return ["-z", "2"]
    return ["-z", "8"]


def test_every_example_has_its_twin_in_the_list():
    assert {"shapes_cnn", "char_transformer", "blocksparse_transformer"} <= set(TWINS)


@pytest.mark.parametrize("name", TWINS)
def test_twin_and_yaml_train_the_same_run_with_the_same_flags(name, tmp_path, request):
    flags = ["-e", "1", "--max-batches", "2", "-q", "-r", "3", *data_flags(name, request)]
    assert main(["train", str(EXAMPLES / f"{name}.yaml"), *flags, "-o",
                 str(tmp_path / "yaml.h5")]) == 0
    assert run_twin(name, [*flags, "-o", str(tmp_path / "twin.h5")]) in (0, None)
    yaml, twin = read_log(tmp_path / "yaml.h5"), read_log(tmp_path / "twin.h5")
    assert len(twin["batch"]["cost"]) == 2, "--max-batches 2 and -e 1: two batches"
    np.testing.assert_array_equal(twin["batch"]["cost"], yaml["batch"]["cost"])
    assert twin["metric"] == yaml["metric"]


def test_bf16_twin_and_yaml_train_the_same_bf16_run(tmp_path):
    """``-d bf16`` reaches the twin's run as the YAML's: the same bf16 costs, bit for bit."""
    flags = ["-e", "1", "--max-batches", "2", "-q", "-r", "3", "-z", "2", "-d", "bf16"]
    assert main(["train", str(EXAMPLES / "gpt512_bf16.yaml"), *flags, "-o",
                 str(tmp_path / "yaml.h5")]) == 0
    assert run_twin("gpt512_bf16", [*flags, "-n", "0", "-o", str(tmp_path / "twin.h5")]) in \
        (0, None)
    yaml, twin = read_log(tmp_path / "yaml.h5"), read_log(tmp_path / "twin.h5")
    np.testing.assert_array_equal(twin["batch"]["cost"], yaml["batch"]["cost"])
    assert "datatype: bf16" in twin["config"] and "datatype: bf16" in yaml["config"]


def test_transformer_twin_takes_the_cli_flags_from_the_shell(tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLES / "char_transformer.py"), "-e", "1",
                           "--max-batches", "1", "-z", "2", "-n", "5", "--eval-freq", "0"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "epoch 1/1: mean train cost" in done.stderr
    assert "done: 1 epoch in" in done.stderr
