"""A diverged training never leaves a checkpoint behind: the parameters are checked after
every update, a NaN/inf checkpoint is never written (nor replaces a good one), a cost growing
without bound is stopped by the divergence guard, and loading a non-finite checkpoint warns."""
import h5py
import numpy as np
import pytest

import neonlite
from neonlite import Model
from neonlite.callbacks import Callbacks
from neonlite.cli import main
from neonlite.data import ArrayIterator
from neonlite.layers import Affine, GeneralizedCost
from neonlite.optimizers import Adam, GradientDescentMomentum
from neonlite.serialize import read_checkpoint
from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax

RUN = """\
backend: cpu
epochs: {epochs}
batchsize: 16
rng_seed: 0
eval_freq: 0
dataset: {{type: shapes, config: {{n: 64, size: 8, classes: 4, seed: 0}}}}
layers:
  - {{type: Affine, config: {{nout: 16, activation: {{type: Rectlin}}}}}}
  - {{type: Affine, config: {{nout: 4, activation: {{type: Softmax}}}}}}
cost: {{type: GeneralizedCost, config: {{costfunc: {{type: CrossEntropyMulti}}}}}}
optimizer: {{type: {optimizer}, config: {{learning_rate: {lr}}}}}
{extra}"""


def run_yaml(tmp_path, lr, epochs=1, optimizer="GradientDescentMomentum", extra=""):
    path = tmp_path / "run.yaml"
    path.write_text(RUN.format(lr=lr, epochs=epochs, optimizer=optimizer, extra=extra))
    return path


def train(capsys, config, *flags):
    status = main(["train", str(config), "-q", *flags])
    return status, capsys.readouterr().err.strip().splitlines()


def test_huge_learning_rate_stops_before_any_checkpoint(tmp_path, capsys):
    ckpt = tmp_path / "c.h5"
    status, lines = train(capsys, run_yaml(tmp_path, "1.0e45"), "--max-batches", "1",
                          "--save-path", str(ckpt))
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("neonlite: error: ")
    assert "epoch 1, batch 1" in lines[0] and "NaN or inf" in lines[0]
    assert not ckpt.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]


def test_a_good_checkpoint_is_never_replaced_by_a_diverged_one(tmp_path, capsys, datatype="f32"):
    """(f16 is refused on the CPU; the GPU host stand-in tests cover the f16 finiteness check.)"""
    ckpt = tmp_path / "c.h5"
    assert train(capsys, run_yaml(tmp_path, "0.1"), "--save-path", str(ckpt), "-d",
                 datatype)[0] == 0
    good = ckpt.read_bytes()
    status, lines = train(capsys, run_yaml(tmp_path, "1.0e45", epochs=3), "--resume", str(ckpt),
                          "--save-path", str(ckpt), "--serialize", "1", "-d", datatype)
    assert status == 1 and len(lines) == 1, lines
    assert "epoch 2, batch 1" in lines[0]
    assert ckpt.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.h5", "run.yaml"]


def _model(seed=0):
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=seed)
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(32, 5)), rng.integers(0, 3, 32), nclass=3)
    return Model([Affine(6, activation=Rectlin()), Affine(3, activation=Softmax())]), data


def test_first_nonfinite_names_the_parameter_or_the_optimizer_state():
    model, data = _model()
    model.fit(data, GradientDescentMomentum(0.1, momentum_coef=0.9), 1,
              GeneralizedCost(CrossEntropyMulti()))
    assert model.first_nonfinite() is None
    param = model.parameters()[1]
    param.value[0:1] = param.value[0:1] * np.inf
    assert model.first_nonfinite() == param.name
    param.value[:] = 0.0
    state = next(iter(param.states))
    param.states[state][:] = param.states[state] * np.nan
    assert model.first_nonfinite() == f"{param.name}/{state}"


def test_python_save_refuses_non_finite_values(tmp_path):
    model, data = _model()
    model.fit(data, GradientDescentMomentum(0.1), 1, GeneralizedCost(CrossEntropyMulti()))
    model.save(tmp_path / "good.h5")
    good = (tmp_path / "good.h5").read_bytes()
    model.parameters()[0].value[:] = np.nan
    with pytest.raises(FloatingPointError, match="not saved.*NaN or inf"):
        model.save(tmp_path / "good.h5")
    assert (tmp_path / "good.h5").read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.h5"]


def test_divergence_guard_stops_a_cost_growing_without_bound():
    model, data = _model()
    rng = np.random.default_rng(1)
    big = ArrayIterator(rng.normal(size=(64, 5)) * 1e3, rng.integers(0, 3, 64), nclass=3)
    with pytest.raises(FloatingPointError, match="diverged at epoch"):
        model.fit(big, Adam(learning_rate=1e6), 50, GeneralizedCost(CrossEntropyMulti()))


def test_divergence_guard_is_configurable_and_can_be_turned_off():
    from neonlite.callbacks import DivergenceGuard
    model, data = _model()
    callbacks = Callbacks(model, progress=False)
    callbacks.add(DivergenceGuard(max_cost=1e-9))
    assert sum(isinstance(cb, DivergenceGuard) for cb in callbacks.callbacks) == 1
    with pytest.raises(FloatingPointError, match="max_cost"):
        model.fit(data, GradientDescentMomentum(0.01), 1, GeneralizedCost(CrossEntropyMulti()),
                  callbacks)
    model, data = _model()
    callbacks = Callbacks(model, progress=False, divergence_guard=False)
    model.fit(data, GradientDescentMomentum(0.01), 1, GeneralizedCost(CrossEntropyMulti()),
              callbacks)
    with pytest.raises(ValueError, match="growth"):
        DivergenceGuard(growth=-1)


def test_divergence_guard_from_yaml(tmp_path, capsys):
    extra = "callbacks:\n  - {type: DivergenceGuard, config: {max_cost: 1.0e-6}}\n"
    status, lines = train(capsys, run_yaml(tmp_path, "0.1", extra=extra))
    assert status == 1 and len(lines) == 1 and "max_cost" in lines[0], lines


def _poison(path, name):
    """Set parameter ``name`` of checkpoint ``path`` to NaN, keeping the file consistent."""
    from support.attacks import array_crc32
    with h5py.File(path, "r+") as f:
        data = f["params"][name][()]
        data[...] = np.nan
        f["params"][name][...] = data
        if "crc32" in f["params"][name].attrs:
            f["params"][name].attrs["crc32"] = array_crc32(data)


@pytest.mark.parametrize("command", ["eval", "describe"])
def test_loading_a_non_finite_checkpoint_warns(tmp_path, capsys, command):
    ckpt = tmp_path / "c.h5"
    assert train(capsys, run_yaml(tmp_path, "0.1"), "--save-path", str(ckpt))[0] == 0
    name = next(iter(read_checkpoint(ckpt).params))
    _poison(ckpt, name)
    argv = [command, str(ckpt)] + (["--max-batches", "1"] if command == "eval" else [])
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"neonlite: warning: {ckpt}: {name} holds NaN or inf values" in err


def test_quiet_silences_numpy_warnings(tmp_path, capsys):
    import warnings

    from neonlite.cli.errors import run_guarded

    def noisy():
        warnings.warn("overflow encountered in exp", RuntimeWarning)

    assert run_guarded(noisy, quiet=True) == 0
    assert capsys.readouterr().err == ""
    assert run_guarded(noisy) == 0
    assert capsys.readouterr().err.strip() == "neonlite: warning: overflow encountered in exp"


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_finiteness_check_on_the_gpu_backend_code_on_a_host_stand_in(monkeypatch, dtype):
    """The non-CPU path of neonlite.finite (the backend's max/min op-trees into a one-element
    work tensor) on the GPU backend run by the host emulator: compiled and emulated, not run on
    a GPU."""
    from support.gpu_host_backend import host_gpu_backend

    from neonlite.finite import tensor_is_finite
    be = host_gpu_backend(monkeypatch, dtype=dtype)
    host = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    tensor = be.array(host)
    work = {}
    assert tensor_is_finite(tensor, work)
    for bad in (np.nan, np.inf, -np.inf):
        broken = host.copy()
        broken[2, 5] = bad
        tensor.set(broken)
        assert not tensor_is_finite(tensor, work), bad
    assert len(work) == 1
