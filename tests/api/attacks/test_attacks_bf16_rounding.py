"""Bad ``bf16_rounding`` settings (the rounding of ``-d bf16``'s weight copies, YAML key and
``--bf16-rounding``) are one line before the work: an unknown mode in the YAML or on the
command line, and stochastic rounding for a run that has no bf16 copies on the cpu (``-d
f32``).  Each case runs in its own bounded process (``support.isolated``); the folder is
unchanged afterwards (no log written: refused before training).  The table is
``bf16_rounding.tsv`` in the test's temporary folder; a good stochastic run closes it."""
import pytest
from support.file_state import refused_case
from support.hdf5_run import run_yaml, write_hdf5
from support.isolated import AttackTable, neonlite_argv, run_isolated
from support.requires import requires

pytestmark = requires("compiler")
TRAIN = ("train", "run.yaml", "-q", "-o", "log.h5")


@pytest.fixture
def folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "run.yaml").write_text(run_yaml())
    write_hdf5(work / "data.h5")
    write_hdf5(work / "valid.h5", rows=16)
    return work


@pytest.fixture
def table(tmp_path):
    return AttackTable(tmp_path / "bf16_rounding.tsv")


CASES = {
    "YAML bf16_rounding: sideways": ("bf16_rounding: sideways\n", (),
                                     "bf16_rounding: expected one of nearest, stochastic"),
    "YAML bf16_rounding: 1": ("bf16_rounding: 1\n", (), "bf16_rounding: expected"),
    "--bf16-rounding sideways": ("", ("-d", "bf16", "--bf16-rounding", "sideways"),
                                 "--bf16-rounding"),
    "--bf16-rounding stochastic -d f32": ("", ("-d", "f32", "--bf16-rounding", "stochastic"),
                                          "'stochastic' rounds the bf16 weight copies"),
    "YAML bf16_rounding: stochastic, -d f32": ("bf16_rounding: stochastic\n", ("-d", "f32"),
                                               "this run is -d f32 on cpu"),
}


@pytest.mark.parametrize("attack", list(CASES))
def test_a_bad_bf16_rounding_is_one_line_before_the_work(attack, folder, table):
    extra_yaml, flags, phrase = CASES[attack]
    (folder / "run.yaml").write_text(run_yaml() + extra_yaml)
    result, before, after = refused_case(table, attack, neonlite_argv(*TRAIN, *flags), folder)
    assert result.outcome == "one-line error", result.stderr[-2000:]
    assert phrase in result.message, result.message
    assert after == before, f"{attack}: the folder changed: {set(after) ^ set(before)}"


def test_a_stochastic_bf16_run_trains(folder, table):
    result = table.add("-d bf16 --bf16-rounding stochastic (good)", run_isolated(
        neonlite_argv(*TRAIN, "-d", "bf16", "--bf16-rounding", "stochastic"), cwd=folder))
    assert result.status == 0, result.stderr[-2000:]
    assert (folder / "log.h5").exists()
