"""A checkpoint's counters (the optimizer's step, good and skipped steps; the epoch, step and
batch index): the file stores int64, so a value beyond 2**63 - 1 is refused when it is read,
and resuming (or ``fit``) refuses one beyond 2**62, which leaves no room to count on.  The
step 2**63 - 1 used to pass, train a whole epoch with ``--resume`` and then fail to save
(``OverflowError``), leaving no checkpoint.

Each CLI case runs in its own process under a time and memory bound (``support.isolated``);
the table is ``checkpoint_counters.tsv`` in the test's folder."""
import json
import shutil

import h5py
import pytest
from support.attacks import GOOD, make_good
from support.isolated import AttackTable, neonlite_argv, run_isolated

from neonlite.serialize import CheckpointError, read_checkpoint


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return make_good(tmp_path_factory.mktemp("good"))


def _optimizer_counter(key, value):
    def edit(f):
        state = json.loads(f["optimizer"].attrs["state"])
        state["default"][key] = value
        f["optimizer"].attrs["state"] = json.dumps(state)
    return edit


def _progress_counter(key, value):
    def edit(f):
        f["progress"].attrs[key] = value
    return edit


HUGE = 2 ** 63 - 1
UNSTORABLE = {
    "optimizer step 2**70": (_optimizer_counter("step", 2 ** 70), "/optimizer state default.step"),
    "skipped_steps 2**64": (_optimizer_counter("skipped_steps", 2 ** 64),
                            "/optimizer state default.skipped_steps"),
    "progress step_index 2**64-1": (_progress_counter("step_index", 2 ** 64 - 1),
                                    "/progress step_index"),
}
NO_ROOM = {
    "optimizer step 2**63-1": (_optimizer_counter("step", HUGE), "/optimizer state default.step"),
    "optimizer step 2**62+1": (_optimizer_counter("step", 2 ** 62 + 1),
                               "/optimizer state default.step"),
    "progress step_index 2**63-1": (_progress_counter("step_index", HUGE),
                                    "/progress step_index"),
    "progress epoch_index 2**63-1": (_progress_counter("epoch_index", HUGE),
                                     "/progress epoch_index"),
}


def _edited(good, folder, edit):
    path = folder / "edited.h5"
    shutil.copyfile(good["ckpt"], path)
    with h5py.File(path, "r+") as f:
        edit(f)
    return path


@pytest.mark.parametrize("case", list(UNSTORABLE))
def test_read_checkpoint_refuses_a_counter_no_int64_holds(tmp_path, good, case):
    edit, entry = UNSTORABLE[case]
    with pytest.raises(CheckpointError, match=f"damaged checkpoint: {entry}: .* beyond the "
                                              r"largest counter a checkpoint stores"):
        read_checkpoint(_edited(good, tmp_path, edit))


def _resume(tmp_path, folder, ckpt):
    run = tmp_path / "run.yaml"
    run.write_text(GOOD.replace("epochs: 1", "epochs: 2"))
    out = folder / "resumed.h5"
    return out, run_isolated(neonlite_argv("train", run, "-q", "--resume", ckpt,
                                           "--save-path", out), memory_mib=2048, seconds=120)


def test_resume_from_a_counter_with_no_room_is_one_line_before_training(tmp_path, good):
    table = AttackTable(tmp_path / "checkpoint_counters.tsv")
    wrong = []
    for i, (case, (edit, entry)) in enumerate({**NO_ROOM, **UNSTORABLE}.items()):
        folder = tmp_path / f"case{i}"
        folder.mkdir()
        out, result = _resume(tmp_path, folder, _edited(good, folder, edit))
        table.add(case, result)
        if result.outcome != "one-line error" or f"{entry}: " not in result.message or \
                out.exists():
            wrong.append(f"{case}: {result.outcome}: {result.message or result.stderr[-300:]}")
    assert not wrong, "\n".join(wrong)


def test_the_largest_resumable_step_trains_saves_and_reads_back(tmp_path, good):
    ckpt = _edited(good, tmp_path, _optimizer_counter("step", 2 ** 62))
    out, result = _resume(tmp_path, tmp_path, ckpt)
    assert result.outcome == "success", result.stderr
    assert read_checkpoint(out).optimizer_state["default"]["step"] > 2 ** 62


def test_fit_after_loading_a_counter_with_no_room_refuses_before_training(tmp_path, good):
    import numpy as np

    from neonlite import Model, gen_backend
    from neonlite.data import ArrayIterator
    from neonlite.layers import GeneralizedCost
    from neonlite.optimizers import GradientDescentMomentum
    from neonlite.transforms import CrossEntropyMulti
    gen_backend("cpu", batch_size=16, rng_seed=0)
    model = Model.load(_edited(good, tmp_path, _progress_counter("step_index", HUGE)))
    before = model.get_params()
    x = np.zeros((32,) + model.in_shape, np.float32)
    with pytest.raises(ValueError, match=f"step_index is {HUGE}, which leaves no room to train"):
        model.fit(ArrayIterator(x, np.zeros(32, int), nclass=4), GradientDescentMomentum(0.1),
                  model.epoch_index + 1, GeneralizedCost(CrossEntropyMulti()), progress=False)
    for key, value in model.get_params().items():
        np.testing.assert_array_equal(value, before[key])
