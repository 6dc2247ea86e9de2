"""bfloat16 training on the CPU (issue 36, the recipe): the model's parameters are stored as
bf16 and each is its float32 master rounded (stochastically by default, with the key of the
last step; to nearest even where the run asks), the masters and the optimizer
states are float32 (bf16 bits where the YAML asks for ``state_dtype: bf16``); a small
character transformer trained on real Tiny Shakespeare with ``-d bf16`` ends within 0.02 nats
of the same run in float32; a checkpoint written after the first of two epochs under bf16
resumes to the same parameters, masters and states bit for bit; ``neonlite generate`` writes
text with a bf16-trained checkpoint.

The loss bound: both runs see the same batches from the same initial weights, so they differ
only by rounding.  bf16 keeps 8 significant bits (a relative error of at most 2^-9 per stored
value); the masters keep every update, so the rounding does not accumulate in the weights, and
the losses differ by the perturbation of one forward pass plus a trajectory that drifts
slowly.  PyTorch's CPU autocast of the same-sized network (d 64, 2 blocks, T 64, batch 16,
Adam 3e-3, 100 steps of Tiny Shakespeare, seeds 0 to 2, measured when this test was written)
moved the mean of the last 20 losses by at most 1e-4 nats and no step's loss by more than 1e-3; neonlite stores activations and gradients in bf16 as well, which autocast
does not, so the bound is the issue's own 0.02 nats, 20 times the largest single-step
difference seen there, still well below what a broken path gives (a loss that stalls near its
4.7-nat start, or rises; float32 falls to 2.6 here)."""
import io

import numpy as np
import pytest
from support.checks import assert_same_state
from support.harness import data_dir
from support.requires import need, requires
from support.tiny_lm import tiny_lm

import neonlite
from neonlite.backends.shared.bf16_rounding import f32_to_bf16_stochastic, round_key
from neonlite.backends.shared.bfloat16 import bf16_to_f32, f32_to_bf16
from neonlite.cli import main
from neonlite.cli.text_examples import train_text_lm
from neonlite.data import TextCorpus
from neonlite.layers import GeneralizedCost
from neonlite.optimizers import Adam
from neonlite.optimizers.mixed_precision import MixedPrecision, for_datatype, is_16bit_float
from neonlite.serialize import read_checkpoint
from neonlite.transforms import CrossEntropyMulti

STEPS, TAIL, BOUND = 100, 20, 0.02
needs_text = requires("shakespeare")


@pytest.fixture(autouse=True)
def keep_backend():
    previous = neonlite.backends._current
    yield
    neonlite.backends._current = previous


def shakespeare():
    return str(data_dir() / "text" / "tinyshakespeare.txt")


def _run(datatype):
    """(per-step training losses, validation loss) of the small transformer, ``datatype``."""
    _, _, losses, valid = train_text_lm(
        lambda vocab: tiny_lm(vocab, T=64, d=64, heads=4, blocks=2), Adam(3e-3), shakespeare(),
        STEPS, "cpu", 16, 0, 64, STEPS, io.StringIO(), datatype=datatype)
    return np.asarray(losses), valid


@needs_text
def test_bf16_training_follows_float32_on_real_text():
    f32, f32_valid = _run("f32")
    bf16, bf16_valid = _run("bf16")
    assert len(bf16) == len(f32) == STEPS
    assert bf16[0] == pytest.approx(f32[0], abs=0.01), "the same start, within one rounding"
    tail32, tail16 = f32[-TAIL:].mean(), bf16[-TAIL:].mean()
    assert tail16 < bf16[0] - 1.0, f"bf16 did not learn: {bf16[0]:.3f} -> {tail16:.3f}"
    assert abs(tail16 - tail32) <= BOUND, (tail16, tail32)
    assert abs(bf16_valid - f32_valid) <= BOUND, (bf16_valid, f32_valid)


@needs_text
def test_bf16_compute_path_training_follows_float32_on_real_text(monkeypatch):
    """The same run with the products and the attention on the compute path
    (``NEONLITE_BF16=compute``: bf16 arithmetic, float32 accumulation) on the AMX kernel's code
    with its tile instructions emulated in C (``gemm_bf16_amx_emulated``, so it runs on every
    CPU; what an AMX CPU runs with the real instructions), against float32 within the same
    bound."""
    from neonlite.backends.cpu import bf16 as bf16_ops
    from neonlite.backends.cpu import bf16_choice
    from neonlite.backends.cpu.attention import CPUAttentionCalls
    f32, f32_valid = _run("f32")
    emulated = neonlite.gen_backend("cpu", batch_size=1).kernels.variant(
        "gemm_bf16_amx_emulated")
    for where in (bf16_ops, bf16_choice):
        monkeypatch.setattr(where, "gemm_module", lambda modules: (emulated, "emulated AMX"))
    monkeypatch.setattr(bf16_choice, "gemm_variant", lambda: ("gemm_bf16_amx", "emulated AMX"))
    monkeypatch.setenv("NEONLITE_BF16", "compute")
    calls, attentions = [], []
    real, attention = bf16_ops.gemm_bf16, CPUAttentionCalls._run_compute
    monkeypatch.setattr(bf16_ops, "gemm_bf16", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(CPUAttentionCalls, "_run_compute",
                        lambda *a, **k: attentions.append(attention(*a, **k)) or attentions[-1])
    bf16, bf16_valid = _run("bf16")
    assert len(calls) >= 6 * STEPS, "the products did not take the compute path"
    assert len(attentions) >= 4 * STEPS and all(attentions), "nor did the attention"
    tail32, tail16 = f32[-TAIL:].mean(), bf16[-TAIL:].mean()
    assert tail16 < bf16[0] - 1.0, f"bf16 did not learn: {bf16[0]:.3f} -> {tail16:.3f}"
    assert abs(tail16 - tail32) <= BOUND, (tail16, tail32)
    assert abs(bf16_valid - f32_valid) <= BOUND, (bf16_valid, f32_valid)


@needs_text
@pytest.mark.parametrize("rounding", [None, "nearest"])
def test_parameters_are_bf16_roundings_of_float32_masters(rounding):
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0, datatype="bfloat16")
    corpus = TextCorpus(shakespeare(), seq_len=16, nbatches=3)
    model = tiny_lm(len(corpus.vocab))
    opt = for_datatype(Adam(3e-3), "bf16", rounding)
    assert isinstance(opt, MixedPrecision) and not opt.check_overflow
    model.initialize(corpus, opt.wrap_cost(GeneralizedCost(CrossEntropyMulti())))
    model.fit(corpus, opt, 1, model.cost, progress=False)
    params = model.parameters()
    assert params and all(is_16bit_float(p.value) and is_16bit_float(p.grad) for p in params)
    for k, p in enumerate(params):
        master = p.states["master"]
        assert master.dtype == np.float32, p.name
        assert p.states["m"].dtype == p.states["v"].dtype == np.float32, p.name
        value = p.value.get()
        assert value.dtype == np.float32, "get() of bf16 storage gives float32 values"
        rounded = f32_to_bf16(master.get()) if rounding == "nearest" else \
            f32_to_bf16_stochastic(master.get(), round_key(0, opt.step - 1, k))
        np.testing.assert_array_equal(value, bf16_to_f32(rounded), err_msg=p.name)
    assert np.dtype(be.dtype).itemsize == 2


RESUMED = {
    "conv": """\
epochs: 2
batchsize: 16
rng_seed: 7
dataset: {type: shapes, config: {n: 70, size: 8, classes: 4, seed: 3, nvalid: 20}}
layers:
  - type: Conv
    config: {fshape: [3, 3, 4], padding: 1, batch_norm: true, activation: {type: Rectlin}}
  - {type: Pooling, config: {fshape: 2}}
  - {type: Dropout, config: {keep: 0.7}}
  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer:
  type: Adam
  config:
    learning_rate: 0.01
    schedule: {type: CosineSchedule, config: {total_steps: 12, warmup_steps: 2}}
""",
    "transformer with bf16 moments": """\
epochs: 2
batchsize: 4
rng_seed: 5
eval_freq: 0
vocab: &vocab auto
dataset: {type: text, config: {seq_len: 32, split: 0.9, nbatches: 3}}
layers:
  - {type: Embedding, config: {vocab: *vocab, d: 32, name: embed}}
  - {type: PositionalEmbedding, config: {max_len: 32, d: 32, name: pos}}
  - {type: TransformerBlock, config: {d_model: 32, heads: 2, dropout: 0.1}}
  - {type: LayerNorm, config: {name: ln_f}}
  - {type: Affine, config: {nout: *vocab, activation: {type: Softmax}, name: head}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer: {type: AdamW, config: {learning_rate: 0.003, state_dtype: bf16}}
""",
}


def _train(*args):
    assert main(["train", *map(str, args), "-q", "-d", "bf16"]) == 0


@pytest.mark.parametrize("name", list(RESUMED))
def test_a_bf16_checkpoint_resumes_bit_for_bit(name, tmp_path, capsys):
    if "transformer" in name:
        need("shakespeare")
    config = tmp_path / "run.yaml"
    config.write_text(RESUMED[name])
    data = ["--data", shakespeare()] if "transformer" in name else []
    _train(config, *data, "-e", 2, "--save-path", tmp_path / "straight.h5")
    _train(config, *data, "-e", 1, "--save-path", tmp_path / "half.h5")
    half = read_checkpoint(tmp_path / "half.h5")
    assert half.epoch_index == 1 and half.config["datatype"] == "bf16"
    _train("--resume", tmp_path / "half.h5", "-e", 2, "--save-path", tmp_path / "resumed.h5")
    straight, resumed = (read_checkpoint(tmp_path / f"{n}.h5") for n in ("straight", "resumed"))
    assert_same_state(straight, resumed)
    moments = np.uint16 if "bf16 moments" in name else np.float32
    for name_, keys in straight.states.items():
        assert keys["master"].dtype == np.float32, name_
        assert keys["m"].dtype == keys["v"].dtype == moments, name_
    if "transformer" in name:
        capsys.readouterr()
        assert main(["generate", str(tmp_path / "resumed.h5"), "--prompt", "ROMEO:", "-n",
                     "20", "-r", "1"]) == 0
        assert capsys.readouterr().out.startswith("ROMEO:")


def _affine_run():
    from neonlite.data import ArrayIterator
    from neonlite.layers import Affine
    from neonlite.transforms import Rectlin, Softmax
    neonlite.gen_backend("cpu", batch_size=8, rng_seed=0, datatype="bf16")
    rng = np.random.default_rng(0)
    data = ArrayIterator(rng.normal(size=(48, 5)), rng.integers(0, 3, 48), nclass=3)
    model = neonlite.Model([Affine(6, activation=Rectlin()), Affine(3, activation=Softmax())])
    return model, data, GeneralizedCost(CrossEntropyMulti())


def test_a_bf16_step_that_overflows_the_masters_stops_at_that_step():
    from neonlite.callbacks import Callbacks, FunctionCallback
    model, data, cost = _affine_run()
    optimizer = for_datatype(Adam(1e-2), "bf16")

    def blow_up(epoch, batch, value):
        if batch == 2:  # the fourth update (batch index 3) overflows every weight it moves
            optimizer.optimizer.learning_rate = 1e45

    callbacks = Callbacks(model, progress=False, divergence_guard=False)
    callbacks.add(FunctionCallback(on_minibatch_end=blow_up))
    with pytest.raises(FloatingPointError, match="NaN or inf in the update at epoch 1, batch 4"):
        model.fit(data, optimizer, 1, cost, callbacks=callbacks)
    assert not optimizer.updated_finite(model.parameters())


def test_bf16_steps_after_the_first_take_the_fused_pass_at_its_word(monkeypatch):
    """The masters' fused pass says whether it wrote only finite values; with each bf16
    parameter checked once, the training loop's full pass over every tensor (parameters,
    masters, moments) runs on the first step only."""
    model, data, cost = _affine_run()
    passes = []
    original = neonlite.Model.first_nonfinite
    monkeypatch.setattr(neonlite.Model, "first_nonfinite",
                        lambda self: passes.append(1) or original(self))
    optimizer = for_datatype(Adam(1e-2), "bf16")
    model.fit(data, optimizer, 2, cost, progress=False)
    assert len(passes) == 1, f"{len(passes)} full passes over 12 steps"
    assert optimizer.updated_finite(model.parameters())
    assert original(model) is None


def test_model_save_records_bf16_and_load_makes_that_backend(tmp_path):
    """``Model.save`` of a bf16 model names its data type, so ``Model.load`` with no backend
    yet makes the bf16 one (a checkpoint without it would come back in float32)."""
    model, data, cost = _affine_run()
    optimizer = for_datatype(Adam(1e-2), "bf16")
    model.fit(data, optimizer, 1, cost, progress=False)
    model.save(tmp_path / "m.h5")
    assert read_checkpoint(tmp_path / "m.h5").config["datatype"] == "bf16"
    neonlite.backends._current = None
    loaded = neonlite.Model.load(tmp_path / "m.h5")
    assert is_16bit_float(loaded.parameters()[0].value)
    np.testing.assert_array_equal(loaded.parameters()[0].value.get(),
                                  model.parameters()[0].value.get())
