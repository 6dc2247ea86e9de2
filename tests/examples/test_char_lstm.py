"""examples/char_lstm (stateful LSTM language model): its YAML describes and runs, generation
through the LSTM's decoding state equals rerunning the whole context, and (slow) it learns
Tiny Shakespeare as PyTorch does with the same recipe, the same initial weights and the same
batches: validation loss within 0.05 nats, both timed (training and validation; neonlite's
time also holds reading the text and building the model)."""
import importlib.util
import sys
import time

import numpy as np
import pytest
from support.harness import CHECKOUT, data_dir
from support.requires import requires

import neonlite
from neonlite.cli import main
from neonlite.config.run import RunConfig
from neonlite.config.yaml_io import dump_yaml
from neonlite.model import Model

ROOT = CHECKOUT
TEXT = data_dir() / "text" / "tinyshakespeare.txt"


def twin():
    spec = importlib.util.spec_from_file_location("example_char_lstm",
                                                  ROOT / "examples" / "char_lstm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_yaml_round_trips_and_trains_then_generates(tmp_path, capsys):
    run = RunConfig.from_file(ROOT / "examples" / "char_lstm.yaml")
    desc = run.description()
    assert RunConfig.from_text(dump_yaml(desc), "again").description() == desc
    assert Model.from_description(desc).get_description()["layers"] == desc["layers"]
    ckpt = tmp_path / "lstm.h5"
    assert main(["train", str(ROOT / "examples" / "char_lstm.yaml"), "-e", "1",
                 "--max-batches", "2", "-z", "2", "-q", "--save-path", str(ckpt)]) == 0
    assert main(["generate", str(ckpt), "--prompt", "The ", "-n", "20"]) == 0
    assert capsys.readouterr().out.startswith("The ")


def test_decoding_state_gives_the_same_text_as_rerunning_the_context():
    from neonlite.generation import generate
    module = twin()
    neonlite.gen_backend("cpu", batch_size=1, rng_seed=0, datatype=np.float64)
    model = Model(module.build_model(12, hidden=8, layers=2, d=4).layers.layers)
    for leaf in model.layers.leaves():
        leaf.stateful = False
    from neonlite.serialize import ShapeStub
    model.initialize(ShapeStub((16,)))
    chars = "abcdefghij \n"
    model.layers.layers[0].set_vocabulary(chars)
    cached = generate(model, None, "ab", 30, temperature=1.0, seed=3, use_cache=True)
    full = generate(model, None, "ab", 30, temperature=1.0, seed=3, use_cache=False)
    assert cached == full and len(cached) == 30


def _torch_twin(torch, model, vocab):
    """The same network in PyTorch with the neonlite model's initial weights."""
    net = model.layers.layers
    embed, lstms, head = net[0], net[1:-1], net[-1].layers[0]
    hidden = lstms[0].nout

    class CharLSTM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, embed.d)
            self.lstm = torch.nn.LSTM(embed.d, hidden, num_layers=len(lstms), batch_first=True)
            self.head = torch.nn.Linear(hidden, vocab)

        def forward(self, x, state):
            y, state = self.lstm(self.embed(x), state)
            return self.head(y), state

    twin_net = CharLSTM()
    with torch.no_grad():
        twin_net.embed.weight.copy_(torch.tensor(embed.W.value.get()))
        for k, cell in enumerate(lstms):
            getattr(twin_net.lstm, f"weight_ih_l{k}").copy_(torch.tensor(cell.W.value.get().T))
            getattr(twin_net.lstm, f"weight_hh_l{k}").copy_(torch.tensor(cell.U.value.get().T))
            getattr(twin_net.lstm, f"bias_ih_l{k}").copy_(torch.tensor(cell.b.value.get()))
            getattr(twin_net.lstm, f"bias_hh_l{k}").zero_()
            # one bias per gate, as neonlite's b: PyTorch's second one stays at zero
            getattr(twin_net.lstm, f"bias_hh_l{k}").requires_grad_(False)
        twin_net.head.weight.copy_(torch.tensor(head.W.value.get().T))
        twin_net.head.bias.copy_(torch.tensor(net[-1].layers[1].b.value.get()))
    return twin_net


def _torch_run(torch, net, batches, valid, lr):
    trained = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trained, lr=lr, eps=1e-8)
    state, start = None, time.perf_counter()
    for x, t in batches:
        logits, state = net(x, state)
        state = tuple(s.detach() for s in state)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 t.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 5.0)
        opt.step()
    with torch.no_grad():
        state, total, count = None, 0.0, 0
        for x, t in valid:
            logits, state = net(x, state)
            total += float(torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), t.reshape(-1), reduction="sum"))
            count += t.numel()
    return total / count, time.perf_counter() - start


@pytest.mark.slow
@requires("shakespeare")
def test_learns_tiny_shakespeare_like_pytorch():
    torch = pytest.importorskip("torch", reason="the comparison runs the recipe in PyTorch")
    torch.manual_seed(0)
    module = twin()
    steps, hidden, lr = 150, 128, 2e-3
    neonlite.gen_backend("cpu", batch_size=32, rng_seed=0)
    from neonlite.data import TextCorpus
    corpus = TextCorpus(str(TEXT), seq_len=64, split=0.9, nbatches=steps, streams=True)
    vocab = len(corpus.vocab)

    def host(it):
        return [(torch.tensor(x.get().astype(np.int64)),
                 torch.tensor(np.asarray(t.get()).astype(np.int64))) for x, t in it]
    train_batches, valid_batches = host(corpus), host(corpus.valid_iter)
    start = time.perf_counter()
    model, _, losses, valid = module.train(str(TEXT), steps, batch_size=32, hidden=hidden, lr=lr,
                                           log_every=10 ** 9, stream=sys.stderr)
    neon_seconds = time.perf_counter() - start
    neonlite.gen_backend("cpu", batch_size=32, rng_seed=0)
    fresh = module.build_model(vocab, hidden)
    from neonlite.serialize import ShapeStub
    fresh.initialize(ShapeStub((64,)))
    torch_valid, torch_seconds = _torch_run(torch, _torch_twin(torch, fresh, vocab),
                                            train_batches, valid_batches, lr)
    print(f"\nchar_lstm {steps} steps: neonlite valid {valid:.4f} nats/char in "
          f"{neon_seconds:.1f} s; PyTorch {torch_valid:.4f} in {torch_seconds:.1f} s; "
          f"first/last train loss {losses[0]:.3f}/{np.mean(losses[-10:]):.3f}")
    from neonlite.generation import generate
    print("sample:", repr(generate(model, corpus.vocab, "ROMEO:", 160, temperature=0.8, seed=0)))
    assert valid < np.log(vocab) - 0.8
    assert abs(valid - torch_valid) < 0.05


STATEFUL_RUN = """\
backend: cpu
epochs: 2
batchsize: 4
rng_seed: 5
eval_freq: 1
metric: {type: NatsPerToken}
dataset:
  type: text
  config: {filename: small.txt, seq_len: 8, split: 0.8, nbatches: 3, streams: true}
layers:
  - {type: Embedding, config: {vocab: 10, d: 8, name: embed}}
  - {type: LSTM, config: {nout: 12, forget_bias: 1.0, stateful: true, name: lstm}}
  - {type: GRU, config: {nout: 6, stateful: true, name: gru}}
  - {type: Affine, config: {nout: 10, activation: {type: Softmax}, name: head}}
callbacks:
  - {type: ResetState}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer: {type: Adam, config: {learning_rate: 0.01, gradient_clip_norm: 5.0}}
"""


def test_resume_of_a_stateful_lstm_is_bit_identical(tmp_path):
    from support.checks import assert_same_state

    from neonlite.serialize import read_checkpoint
    config = tmp_path / "run.yaml"
    config.write_text(STATEFUL_RUN)
    (tmp_path / "text").mkdir()
    rng = np.random.default_rng(0)
    (tmp_path / "text" / "small.txt").write_text("".join(rng.choice(list("abcdefgh \n"), 600)))

    def train(*args):
        assert main(["train", str(config), "--data-dir", str(tmp_path), *map(str, args),
                     "-q"]) == 0
    train("-e", 2, "--save-path", tmp_path / "straight.h5")
    train("-e", 1, "--save-path", tmp_path / "half.h5")
    train("-e", 2, "--resume", tmp_path / "half.h5", "--save-path", tmp_path / "resumed.h5")
    straight = read_checkpoint(tmp_path / "straight.h5")
    assert straight.step_index == 6
    assert_same_state(straight, read_checkpoint(tmp_path / "resumed.h5"))
