"""Issue 31, section 3: an output path of ``neonlite train`` / ``plot`` never destroys an input,
a device, a FIFO or another output, and is checked before any work.

Every case runs in its own process (``support.isolated``) and must end in one line
``neonlite: error: ...`` naming the path; the folder the run works in is the same before and
after (every input's hash unchanged, no stray file: no log, no temporary), which also shows
the refusal came before training (a run given ``-o log.h5`` that trained would have written
the log).  The table attack -> outcome -> seconds, peak MiB, message is ``outputs.tsv`` in the
test's temporary folder.
"""
import os
import stat

import pytest
from support.file_state import refused_case, snapshot
from support.hdf5_run import run_yaml, write_hdf5
from support.isolated import AttackTable, neonlite_argv, run_isolated
from support.requires import requires

RUN = run_yaml(valid="data.h5")


@pytest.fixture
def folder(tmp_path):
    """A run folder: ``run.yaml`` training on ``data.h5``; ``model.h5`` a checkpoint of it."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "run.yaml").write_text(RUN)
    write_hdf5(work / "data.h5")
    made = run_isolated(neonlite_argv("train", "run.yaml", "-q", "--save-path", "model.h5"),
                        cwd=work)
    assert made.status == 0, made.stderr
    return work


@pytest.fixture
def table(tmp_path):
    return AttackTable(tmp_path / "outputs.tsv")


def _refused(table, attack, folder, *args, phrase, command="train", first="run.yaml"):
    result, before, after = refused_case(table, attack,
                                         neonlite_argv(command, first, "-q", *args), folder)
    assert result.outcome == "one-line error", result.stderr[-2000:]
    assert phrase in result.message, result.message
    assert after == before, f"{attack}: the folder changed: {set(after) ^ set(before)}"
    return result


COLLISIONS = {
    "profile and checkpoint the same file": (
        ["--profile", "y.h5", "--profile-steps", "0:1", "--save-path", "y.h5"], "y.h5"),
    "log and checkpoint the same file": (["-o", "x.h5", "--save-path", "x.h5"], "x.h5"),
    "log and profile the same file": (
        ["-o", "x.json", "--profile", "./x.json", "--profile-steps", "0:1"], "x.json"),
    "checkpoint over the run's YAML": (["-o", "log.h5", "--save-path", "run.yaml"], "run.yaml"),
    "log over the run's YAML": (["-o", "run.yaml"], "run.yaml"),
    "profile over the run's YAML": (["--profile", "run.yaml", "--profile-steps", "0:1"],
                                    "run.yaml"),
    "checkpoint over the training data": (["-o", "log.h5", "--save-path", "data.h5"],
                                          "data.h5"),
    "log over the training data": (["-o", "data.h5"], "data.h5"),
    "checkpoint over the data by another spelling": (
        ["-o", "log.h5", "--save-path", "sub/../data.h5"], "data.h5"),
    "checkpoint over --model-file": (
        ["-o", "log.h5", "--model-file", "model.h5", "--save-path", "model.h5"], "model.h5"),
    "log over the --resume checkpoint": (["--resume", "model.h5", "-o", "model.h5"],
                                         "model.h5"),
}


@pytest.mark.parametrize("attack", list(COLLISIONS))
def test_an_output_never_replaces_an_input_or_another_output(attack, folder, table):
    args, phrase = COLLISIONS[attack]
    (folder / "sub").mkdir()
    _refused(table, attack, folder, *args, phrase=phrase)


def test_a_hard_link_to_an_input_is_that_input(folder, table):
    os.link(folder / "run.yaml", folder / "alias.h5")
    _refused(table, "checkpoint at a hard link of the YAML", folder, "-o", "log.h5",
             "--save-path", "alias.h5", phrase="alias.h5")


def test_resuming_into_its_own_checkpoint_still_works(folder, table):
    """``--resume ckpt --save-path ckpt`` continues a run in place: the checkpoint is read
    whole before the first step and replaced atomically after it."""
    result = table.add("resume into its own checkpoint", run_isolated(neonlite_argv(
        "train", "run.yaml", "-q", "-e", "2", "--resume", "model.h5", "--save-path", "model.h5"),
        cwd=folder))
    assert result.outcome == "success", result.stderr


TARGETS = {
    "a folder": (lambda p: p.mkdir(), "is a folder"),
    "a symlink to the YAML": (lambda p: p.symlink_to("run.yaml"), "symbolic link"),
    "a dangling symlink": (lambda p: p.symlink_to("/nonexistent/x.h5"), "symbolic link"),
    "a FIFO": (lambda p: os.mkfifo(p), "FIFO"),
}


@pytest.mark.parametrize("flag", ["--save-path", "-o", "--profile"])
@pytest.mark.parametrize("target", list(TARGETS))
def test_an_output_at_a_folder_link_or_fifo_is_refused(flag, target, folder, table):
    make, phrase = TARGETS[target]
    make(folder / "out.h5")
    extra = ["--profile-steps", "0:1"] if flag == "--profile" else ["-o", "log.h5"]
    _refused(table, f"{flag} at {target}", folder, *extra, flag, "out.h5", phrase=phrase)
    assert stat.S_IFMT(os.lstat(folder / "out.h5").st_mode) != stat.S_IFREG


@requires("mknod")
@pytest.mark.parametrize("flag", ["--save-path", "-o", "--profile"])
def test_a_character_device_is_never_replaced(flag, folder, table):
    """What ``-o /dev/null`` as root would do to the system, on a null device of our own."""
    device = folder / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    extra = ["--profile-steps", "0:1"] if flag == "--profile" else []
    _refused(table, f"{flag} at a character device", folder, *extra, flag, "null",
             phrase="character device")
    assert stat.S_ISCHR(os.lstat(device).st_mode)


PLACES = {
    "under /proc": ("/proc/neonlite-x.h5", "/proc"),
    "under a regular file": ("run.yaml/x.h5", "not a folder"),
    "whose temporary name is too long": ("a" * 240 + ".h5", "too long"),
    "an empty name": ("", "empty"),
}


@pytest.mark.parametrize("flag", ["--save-path", "-o", "--profile"])
@pytest.mark.parametrize("place", list(PLACES))
def test_an_unwritable_output_is_refused_before_training(flag, place, folder, table):
    path, phrase = PLACES[place]
    log = ["-o", "log.h5"] if flag != "-o" else ["--save-path", "c.h5"]
    extra = ["--profile-steps", "0:1"] if flag == "--profile" else []
    _refused(table, f"{flag} {place}", folder, *log, *extra, flag, path, phrase=phrase)


def test_plot_to_an_unknown_format_is_one_line(folder, table):
    made = run_isolated(neonlite_argv("train", "run.yaml", "-q", "-o", "log.h5"), cwd=folder)
    assert made.status == 0, made.stderr
    _refused(table, "plot -o x.xyz", folder, "-o", "x.xyz", phrase="xyz", command="plot",
             first="log.h5")


@pytest.mark.parametrize("target", ["/tmp", "sub"])
def test_plot_to_a_folder_is_refused(target, folder, table):
    """``plot -o /tmp`` used to try a temporary file in ``/`` (the parent of the folder)."""
    made = run_isolated(neonlite_argv("train", "run.yaml", "-q", "-o", "log.h5"), cwd=folder)
    assert made.status == 0, made.stderr
    (folder / "sub").mkdir()
    _refused(table, f"plot -o {target}", folder, "-o", target, phrase="is a folder",
             command="plot", first="log.h5")


def test_plot_over_its_own_log_is_refused(folder, table):
    made = run_isolated(neonlite_argv("train", "run.yaml", "-q", "-o", "log.png"), cwd=folder)
    assert made.status == 0, made.stderr
    _refused(table, "plot -o its own log", folder, "-o", "log.png", phrase="log.png",
             command="plot", first="log.png")


def test_nothing_is_left_after_a_good_run(folder, table):
    before = set(snapshot(folder))
    result = table.add("good run", run_isolated(neonlite_argv(
        "train", "run.yaml", "-q", "-o", "log.h5", "--save-path", "c.h5", "--profile",
        "t.json", "--profile-steps", "0:1"), cwd=folder))
    assert result.status == 0, result.stderr
    assert set(snapshot(folder)) - before == {"log.h5", "c.h5", "t.json"}


def test_python_callbacks_check_their_outputs_together(tmp_path):
    """``Model.fit`` with a checkpoint and a log at one path fails at train begin, in the
    Python API too, before either writes."""
    from neonlite.callbacks import Callbacks, ModelCheckpoint
    from neonlite.output_paths import OutputPathError
    from neonlite.training_log import TrainingLog
    callbacks = Callbacks(None, progress=False, divergence_guard=False)
    callbacks.add(ModelCheckpoint(tmp_path / "x.h5"))
    callbacks.add(TrainingLog(tmp_path / "x.h5"))
    with pytest.raises(OutputPathError, match="is also the path of ModelCheckpoint"):
        callbacks.on_train_begin(None, 1)
    assert list(tmp_path.iterdir()) == []
