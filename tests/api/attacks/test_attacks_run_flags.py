"""Issue 31, section 7: flags and files a run is given are refused in one line before the
work, never after it and never with a traceback: a batch size past 32 bits, ``--serialize``
without ``--save-path``, ``--top-k`` past the number of classes, a validation set of the wrong
shape, a full disk (the message names the file), and a long YAML without aliases is not taken
for an alias bomb (while a real one is still refused in bounded memory).

Each case runs in its own bounded process (``support.isolated``); the folder it works in is
unchanged afterwards (no log, no checkpoint, no temporary), which also shows the refusal came
before training.  The table is ``run_flags.tsv`` in the test's temporary folder."""
import pytest
from support.file_state import refused_case
from support.hdf5_run import run_yaml, write_hdf5
from support.isolated import AttackTable, neonlite_argv, python_argv, run_isolated

RUN = run_yaml()
HUGE = "9999999999999999999"


@pytest.fixture
def folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "run.yaml").write_text(RUN)
    write_hdf5(work / "data.h5")
    write_hdf5(work / "valid.h5", rows=16)
    made = run_isolated(neonlite_argv("train", "run.yaml", "-q", "--save-path", "model.h5"),
                        cwd=work)
    assert made.status == 0, made.stderr
    return work


@pytest.fixture
def table(tmp_path):
    return AttackTable(tmp_path / "run_flags.tsv")


def _refused(table, attack, folder, argv, phrase):
    result, before, after = refused_case(table, attack, argv, folder)
    assert result.outcome == "one-line error", result.stderr[-2000:]
    assert phrase in result.message, result.message
    assert after == before, f"{attack}: the folder changed: {set(after) ^ set(before)}"
    return result


COMMANDS = {
    "train": ["train", "run.yaml", "-q", "-o", "log.h5"],
    "eval": ["eval", "model.h5"],
    "profile": ["profile", "run.yaml"],
    "describe": ["describe", "run.yaml"],
    "import": ["import", ".", "-o", "x.h5"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_batch_size_past_32_bits_is_one_line(command, folder, table):
    _refused(table, f"{command} -z {HUGE}", folder,
             neonlite_argv(*COMMANDS[command], "-z", HUGE), "-z/--batch-size")


def test_a_batch_size_past_32_bits_in_the_yaml_is_one_line(folder, table):
    (folder / "run.yaml").write_text(RUN.replace("batchsize: 8", f"batchsize: {HUGE}"))
    _refused(table, f"batchsize: {HUGE}", folder,
             neonlite_argv("train", "run.yaml", "-q", "-o", "log.h5"), "batchsize")


def test_serialize_without_a_save_path_is_refused(folder, table):
    _refused(table, "--serialize 1 without --save-path", folder,
             neonlite_argv("train", "run.yaml", "-q", "-o", "log.h5", "--serialize", "1"),
             "--save-path")
    (folder / "run.yaml").write_text(RUN + "serialize: 2\n")
    _refused(table, "serialize: 2 without save_path", folder,
             neonlite_argv("train", "run.yaml", "-q", "-o", "log.h5"), "--save-path")


def test_top_k_past_the_classes_is_refused_with_the_range(folder, table):
    _refused(table, "eval --top-k 1000 on 4 classes", folder,
             neonlite_argv("eval", "model.h5", "--metric", "topk", "--top-k", "1000"),
             "1 <= k <= 4")
    good = run_isolated(neonlite_argv("eval", "model.h5", "--metric", "topk", "--top-k", "4"),
                        cwd=folder)
    assert good.status == 0 and good.stdout.startswith("top4_misclassification: 0.0000")


def test_a_top_k_metric_past_the_classes_fails_before_training(folder, table):
    (folder / "run.yaml").write_text(RUN + "metric: {type: TopKMisclassification, "
                                           "config: {k: 9}}\n")
    _refused(table, "metric top-9 on 4 classes", folder,
             neonlite_argv("train", "run.yaml", "-q", "-o", "log.h5"), "1 <= k <= 4")


@pytest.mark.parametrize("features", [7, 1])
def test_a_validation_set_of_the_wrong_shape_fails_before_the_first_epoch(features, folder,
                                                                          table):
    write_hdf5(folder / "valid.h5", features, 16)
    _refused(table, f"validation examples of {features} features, training of 6", folder,
             neonlite_argv("train", "run.yaml", "-q", "-o", "log.h5"), "hdf5 valid")


#: neonlite train under a disk that fills at the first fsync (what ENOSPC from a delayed
#: write looks like)
FULL_DISK = """
import errno, os, sys
def full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
os.fsync = full
from neonlite.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_full_disk_names_the_file(folder, table):
    _refused(table, "disk full while saving", folder,
             python_argv(FULL_DISK) + ["train", "run.yaml", "-q", "--save-path", "c.h5"],
             "c.h5: No space left on device")


def _layers_yaml(count):
    lines = ["epochs: 1", "batchsize: 4", "dataset: shapes", "layers:"]
    lines += ["  - {type: Activation, config: {transform: {type: Rectlin}}}"] * count
    lines += ["cost: CrossEntropyMulti", "optimizer: GradientDescentMomentum"]
    return "\n".join(lines) + "\n"


PARSE = ("import sys\nfrom neonlite.config.yaml_io import parse_yaml\n"
         "data = parse_yaml(open(sys.argv[1]).read(), sys.argv[1])\n"
         "print(len(data['layers']))\n")


def test_twenty_thousand_layers_without_aliases_are_not_an_alias_bomb(tmp_path, table):
    (tmp_path / "big.yaml").write_text(_layers_yaml(20_000))
    result = table.add("20,000 layers, no aliases", run_isolated(
        python_argv(PARSE) + ["big.yaml"], cwd=tmp_path, seconds=300, memory_mib=1536))
    assert result.status == 0, result.stderr[-1000:]
    assert result.stdout.strip() == "20000"


def test_a_real_alias_bomb_is_still_refused_in_bounded_memory(tmp_path, table):
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    result = table.add("billion laughs", run_isolated(
        neonlite_argv("describe", "bomb.yaml"), cwd=tmp_path, seconds=30, memory_mib=1024))
    assert result.outcome == "one-line error" and "alias bomb" in result.message, result.stderr
    assert result.peak_mib < 256 and result.seconds < 30
