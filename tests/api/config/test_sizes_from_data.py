"""Sizes a run takes from its data: ``vocab: auto`` (or left out) and ``nout: auto`` from a
text's characters (an image set's classes); a given vocabulary that does not fit the text is
one line before training (too small: an error naming the largest token id; too large: a
warning); CosineSchedule's ``total_steps`` derived from batches x epochs, with a warning where
a given one differs."""
import warnings

import pytest

from neonlite.cli import main
from neonlite.serialize import read_checkpoint

TEXT = "the quick brown fox jumps over the lazy dog. " * 60
CHARS = len(set(TEXT))

RUN = """\
epochs: 2
batchsize: 4
rng_seed: 0
metric: {{type: NatsPerToken}}
dataset: {{type: text, config: {{filename: fox.txt, seq_len: 8, nbatches: 3}}}}
layers:
  - {{type: Embedding, config: {{{embed}d: 8, name: embed}}}}
  - {{type: Affine, config: {{nout: {nout}, activation: {{type: Softmax}}, name: head}}}}
cost: CrossEntropyMulti
optimizer: {{type: Adam, config: {{learning_rate: 0.01{schedule}}}}}
"""


def write_run(tmp_path, embed="vocab: auto, ", nout="auto", schedule=""):
    (tmp_path / "fox.txt").write_text(TEXT)
    path = tmp_path / "run.yaml"
    path.write_text(RUN.format(embed=embed, nout=nout, schedule=schedule))
    return str(path)


def train(capsys, run, *flags):
    status = main(["train", run, "-q", *flags])
    return status, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("embed", ["vocab: auto, ", "", "vocab: auto, pad_id: 5, "],
                         ids=["auto", "left-out", "with-pad-id"])
def test_vocab_and_output_width_come_from_the_text(tmp_path, capsys, embed):
    run = write_run(tmp_path, embed=embed)
    ckpt = tmp_path / "lm.h5"
    status, err = train(capsys, run, "--save-path", str(ckpt))
    assert status == 0 and err == [], err
    saved = read_checkpoint(ckpt)
    assert saved.params["embed.W"].shape == (CHARS, 8)
    assert saved.params["head.W"].shape == (8, CHARS)
    assert saved.config["layers"][0]["config"]["vocab"] == CHARS
    # the checkpoint holds the sizes, and resuming with the YAML ('auto') matches it
    status, err = train(capsys, run, "--resume", str(ckpt), "-e", "3")
    assert status == 0, err


def test_nout_auto_is_the_number_of_classes_of_an_image_set(tmp_path, capsys):
    run = tmp_path / "run.yaml"
    run.write_text("epochs: 1\nbatchsize: 8\n"
                   "dataset: {type: shapes, config: {n: 32, size: 8, classes: 4, nvalid: 8}}\n"
                   "layers: [{type: Affine, config: {nout: auto, activation: {type: Softmax},"
                   " name: out}}]\ncost: CrossEntropyMulti\noptimizer: {type: Adam}\n")
    ckpt = tmp_path / "s.h5"
    assert main(["train", str(run), "-q", "--save-path", str(ckpt)]) == 0
    assert read_checkpoint(ckpt).params["out.W"].shape == (8 * 8 * 3, 4)


def test_a_vocab_too_small_is_one_error_before_training(tmp_path, capsys):
    run = write_run(tmp_path, embed="vocab: 20, ")
    status, err = train(capsys, run, "--save-path", str(tmp_path / "lm.h5"))
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith("neonlite: error: layers[0].config.vocab: 20 is too small")
    assert f"the largest, {CHARS - 1}, needs vocab >= {CHARS}" in err[0]
    assert not (tmp_path / "lm.h5").exists()


def test_an_output_too_narrow_is_one_error_before_training(tmp_path, capsys):
    run = write_run(tmp_path, nout=20)
    status, err = train(capsys, run)
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith("neonlite: error: layers[1]: the output has 20 classes")


def test_a_vocab_too_large_is_a_warning_line_and_trains(tmp_path, capsys):
    run = write_run(tmp_path, embed=f"vocab: {CHARS + 10}, ", nout=CHARS + 10)
    status, err = train(capsys, run)
    assert status == 0, err
    assert err == [f"neonlite: warning: layers[0].config.vocab: {CHARS + 10} is larger than "
                   f"the {CHARS} distinct characters of fox.txt train: rows "
                   f"{CHARS}..{CHARS + 9} of the embedding are never used (vocab: auto sizes "
                   f"it to the data)"]


COSINE = ", schedule: {{type: CosineSchedule, config: {{{total}warmup_steps: 2}}}}"


def test_cosine_total_steps_is_derived_from_batches_and_epochs(tmp_path, capsys):
    from neonlite.config.run import RunConfig
    from neonlite.optimizers.schedules import schedules_of
    run = RunConfig.from_file(write_run(tmp_path, schedule=COSINE.format(total="")))
    built = []
    run.build_optimizer, build = (lambda: built.append(build()) or built[-1]), \
        run.build_optimizer
    from neonlite.cli.session import train as train_run

    class Options:
        data_dir = model_file = resume = output_file = max_batches = None
        quiet, verbose = True, False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train_run(run, Options())
    (schedule,) = schedules_of(built[0])
    assert schedule.total_steps == 3 * 2


def test_a_cosine_total_steps_out_of_step_is_a_warning_line(tmp_path, capsys):
    run = write_run(tmp_path, schedule=COSINE.format(total="total_steps: 500, "))
    status, err = train(capsys, run)
    assert status == 0, err
    assert err == ["neonlite: warning: CosineSchedule: total_steps 500 differs from the run's 6 "
                   "steps (3 batches x 2 epochs), so the decay stops short of its floor; leave "
                   "total_steps out to derive it"]


def test_auto_with_a_data_set_that_knows_no_classes_is_one_error(tmp_path, capsys):
    import h5py
    import numpy as np
    with h5py.File(tmp_path / "r.h5", "w") as f:
        f["x"], f["y"] = np.zeros((16, 4), np.float32), np.zeros((16, 2), np.float32)
    run = tmp_path / "run.yaml"
    run.write_text("epochs: 1\nbatchsize: 8\neval_freq: 0\n"
                   "dataset: {type: hdf5, config: {train: r.h5}}\n"
                   "layers: [{type: Affine, config: {nout: auto}}]\n"
                   "cost: SumSquared\noptimizer: {type: Adam}\n")
    status, err = train(capsys, str(run))
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith("neonlite: error: layers: a size given as 'auto' needs a data set")


def test_model_fit_and_the_schedule_callback_derive_cosine_total_steps():
    import numpy as np

    from neonlite import Model, gen_backend
    from neonlite.callbacks import Callbacks, LearningRateSchedule
    from neonlite.data import ArrayIterator
    from neonlite.layers import Affine, GeneralizedCost
    from neonlite.optimizers import Adam, CosineSchedule
    from neonlite.transforms import CrossEntropyMulti, Softmax
    gen_backend("cpu", batch_size=4, rng_seed=0)
    data = ArrayIterator(np.random.default_rng(0).random((20, 3)), np.arange(20) % 2, nclass=2)
    own, callback = CosineSchedule(warmup_steps=1), CosineSchedule()
    model = Model([Affine(nout=2, activation=Softmax())])
    callbacks = Callbacks(model, progress=False)
    callbacks.add(LearningRateSchedule(callback))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(data, Adam(schedule=own), 3, GeneralizedCost(CrossEntropyMulti()), callbacks)
    assert own.total_steps == callback.total_steps == 5 * 3
    assert own.get_description()["config"]["total_steps"] is None
