"""Every example: its Python twin describes the same run as its YAML, its description survives
YAML and back, and it trains briefly through ``neonlite train`` (and ``python examples/...``).
The slow test trains examples/mnist_cnn.yaml on 8,000 real MNIST images for 5 epochs."""
import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from support.harness import CHECKOUT, unavailable_reason
from support.requires import requires

from neonlite.cli import main
from neonlite.cli.example import example_config, example_main
from neonlite.config.run import RunConfig
from neonlite.config.yaml_io import dump_yaml
from neonlite.model import Model
from neonlite.training_log import read_log

ROOT = CHECKOUT
EXAMPLES = ROOT / "examples"
TWINS = ["shapes_cnn", "mnist_mlp", "mnist_cnn", "cifar10_allcnn", "cifar10_resnet",
         "conv_autoencoder", "inception_shapes"]
needs_mnist = requires("mnist")


def twin(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", TWINS)
def test_python_twin_describes_the_yaml_run(name):
    module = twin(name)
    python = example_config(module.network, module.SETTINGS, name).description()
    yaml = RunConfig.from_file(EXAMPLES / f"{name}.yaml").description()
    assert python == yaml


@pytest.mark.parametrize("name", TWINS + ["char_transformer", "gpt512_bf16"])
def test_yaml_description_round_trips(name):
    run = RunConfig.from_file(EXAMPLES / f"{name}.yaml")
    desc = run.description()
    again = RunConfig.from_text(dump_yaml(desc), "again").description()
    assert again == desc
    model = Model.from_description(desc)
    assert model.get_description()["layers"] == desc["layers"]


def test_resnet20_has_its_published_size(capsys):
    assert main(["describe", str(EXAMPLES / "cifar10_resnet.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.count("MergeSum ") == 9 and out.count("SkipNode ") == 7
    total = int(out.strip().splitlines()[-1].split()[-1].replace(",", ""))
    assert 0.26e6 < total < 0.28e6, "ResNet-20 has about 0.27M parameters"


def brief(config, tmp_path, *flags):
    """Train ``config`` for one short epoch; return the training log."""
    log = tmp_path / "log.h5"
    status = main(["train", str(config), "-e", "1", "--max-batches", "2", "-q", "-o", str(log),
                   *map(str, flags)])
    assert status == 0
    data = read_log(log)
    assert data["complete"] and len(data["batch"]["cost"]) == 2
    assert np.all(np.isfinite(data["batch"]["cost"]))
    return data


def test_shapes_cnn_runs(tmp_path):
    brief(EXAMPLES / "shapes_cnn.yaml", tmp_path)


@needs_mnist
@pytest.mark.parametrize("name", ["mnist_mlp", "mnist_cnn"])
def test_mnist_examples_run(name, tmp_path, mnist_dir):
    brief(EXAMPLES / f"{name}.yaml", tmp_path, "--data-dir", mnist_dir, "-z", 32)


@pytest.mark.parametrize("name", ["cifar10_allcnn", "cifar10_resnet"])
def test_cifar10_examples_run_on_cifar_files(name, tmp_path, cifar_dir):
    brief(EXAMPLES / f"{name}.yaml", tmp_path, "--data-dir", cifar_dir, "-z", 4)


@pytest.mark.parametrize("name", ["cifar10_allcnn", "cifar10_resnet"])
def test_cifar10_examples_run_offline_on_shapes(name, tmp_path):
    """On Shapes instead of CIFAR-10 (the ResNet recipe keeps its augmentation)."""
    text = (EXAMPLES / f"{name}.yaml").read_text()
    short, block = "\ndataset: cifar10\n", "\ndataset:\n  type: cifar10\n  config:\n"
    assert short in text or block in text
    config = tmp_path / f"{name}.yaml"
    config.write_text(text.replace(short, "\ndataset: {type: shapes, config: {n: 16, nclass: "
                                          "10}}\n").replace(
        block, "\ndataset:\n  type: shapes\n  config:\n    n: 16\n    nclass: 10\n"))
    brief(config, tmp_path, "-z", 4)


def test_resnet_recipe_is_the_papers():
    """Pad-4 crop + flip, SGD momentum 0.9, lr 0.1 / 10 at epochs 82 and 123 of 164 (32k, 48k
    and 64k iterations of 391 batches of 128)."""
    desc = RunConfig.from_file(EXAMPLES / "cifar10_resnet.yaml").description()
    augment = desc["dataset"]["config"]["augment"]
    assert [a["type"] for a in augment] == ["pad_crop", "flip", "normalize"]
    assert augment[0]["config"] == {"size": 32, "pad": 4}
    opt = desc["optimizer"]["config"]
    assert (opt["learning_rate"], opt["momentum_coef"], opt["wdecay"]) == (0.1, 0.9, 1e-4)
    assert opt["schedule"]["config"] == {"step_config": [82, 123], "change": 0.1}
    batches = -(-50000 // desc["batchsize"])
    assert [e * batches // 1000 for e in (82, 123, desc["epochs"])] == [32, 48, 64]


def test_char_transformer_yaml_runs(tmp_path):
    ckpt = tmp_path / "lm.h5"
    data = brief(EXAMPLES / "char_transformer.yaml", tmp_path, "-z", 2, "--save-path", ckpt)
    assert data["metric"] == "nats_per_token"
    assert np.log(2) < data["epoch"]["metric"][-1] < 2 * np.log(103)
    from neonlite.serialize import read_checkpoint
    assert read_checkpoint(ckpt).params["embed.chars"][:3].tolist() == [ord(c) for c in "\n !"]


@pytest.mark.parametrize("name", TWINS)
def test_python_twin_runs_with_the_same_flags(name, tmp_path, request):
    module = twin(name)
    flags = ["-e", "1", "--max-batches", "1", "-z", "4", "-q", "-o", str(tmp_path / "log.h5")]
    if name.startswith("mnist"):
        flags += ["--data-dir", str(request.getfixturevalue("mnist_dir"))]
    if name.startswith("cifar10"):
        flags += ["--data-dir", str(request.getfixturevalue("cifar_dir"))]
    assert example_main(module.network, module.SETTINGS, argv=flags, source=name) == 0
    assert read_log(tmp_path / "log.h5")["complete"]


def test_example_script_runs_from_the_shell(tmp_path):
    result = subprocess.run([sys.executable, str(EXAMPLES / "shapes_cnn.py"), "-e", "1",
                             "--max-batches", "1", "--save-path", str(tmp_path / "c.h5")],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "epoch 1/1: mean train cost" in result.stderr
    assert (tmp_path / "c.h5").is_file()


def test_example_script_on_a_missing_gpu_fails_in_one_line(capsys):
    if unavailable_reason("gpu") is None:
        pytest.skip("a GPU backend runs here")
    module = twin("shapes_cnn")
    assert example_main(module.network, module.SETTINGS, argv=["-b", "gpu", "-e", "2"],
                        source="shapes_cnn.py") == 1
    err = capsys.readouterr().err.strip()
    assert err == f"shapes_cnn.py: error: {' '.join(unavailable_reason('gpu').split())}"


@pytest.mark.slow
@needs_mnist
def test_mnist_cnn_reaches_3_percent_on_real_digits(tmp_path, mnist_dir):
    """``neonlite train examples/mnist_cnn.yaml --data-dir DIR``: 5 epochs on 8,000 real
    images, at most 3% misclassification on the other 2,000."""
    log = tmp_path / "log.h5"
    assert main(["train", str(EXAMPLES / "mnist_cnn.yaml"), "--data-dir", str(mnist_dir),
                 "-o", str(log), "-q"]) == 0
    data = read_log(log)
    assert data["epoch"]["index"].tolist() == [0, 1, 2, 3, 4]
    error = data["epoch"]["metric"][-1]
    assert error <= 0.03, f"misclassification {error:.4f} on the 2,000 held-out images"
