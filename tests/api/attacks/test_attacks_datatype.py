"""The data type a run asks the CPU for (``-d``, the YAML's ``datatype``, a checkpoint's), when
the CPU cannot give it: float16 (numpy's emulation, refused with its reason), bfloat16 turned
off (``NEONLITE_BF16=off``, refused saying how to turn it on) or asked for with a bad
``NEONLITE_BF16``.  Each is one ``neonlite: error:`` line before any work, from ``train``,
``profile``, ``eval`` and ``--resume`` alike; the folder (YAML, data, a bf16 checkpoint) is
unchanged afterwards, so nothing was written.

Each case runs in its own bounded process (``support.isolated``); the table is
``datatype.tsv`` in the module's temporary folder."""
import pytest
from support.file_state import refused_case
from support.hdf5_run import run_yaml, write_hdf5
from support.isolated import AttackTable, neonlite_argv, run_isolated
from support.requires import requires

pytestmark = requires("compiler")

RUN = run_yaml("{type: Adam, config: {learning_rate: 0.01}}")
OFF = {"NEONLITE_BF16": "off"}
F16 = "150 times slower"
TURN_ON = "NEONLITE_BF16"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A folder with the run, its data and the checkpoint of a bf16 run of it."""
    work = tmp_path_factory.mktemp("datatype")
    (work / "run.yaml").write_text(RUN)
    write_hdf5(work / "data.h5")
    write_hdf5(work / "valid.h5", rows=16)
    done = run_isolated(neonlite_argv("train", "run.yaml", "-q", "-d", "bf16", "--save-path",
                                      "model.h5"), cwd=work, seconds=120)
    assert done.status == 0, done.stderr
    return work


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return AttackTable(tmp_path_factory.mktemp("datatype_table") / "datatype.tsv")


# attack -> (argv, environment, the YAML's extra line, phrase of the one line)
CASES = {
    "train -d f16 on the cpu": (("train", "run.yaml", "-q", "-d", "f16"), {}, "", F16),
    "profile -d f16 on the cpu": (("profile", "run.yaml", "-d", "f16", "--steps", "1"), {},
                                  "", F16),
    "datatype: f16 in the YAML": (("train", "run.yaml", "-q"), {}, "datatype: f16\n", F16),
    "train -d bf16, NEONLITE_BF16=off": (("train", "run.yaml", "-q", "-d", "bf16"), OFF, "",
                                         TURN_ON),
    "profile -d bf16, NEONLITE_BF16=off": (("profile", "run.yaml", "-d", "bf16", "--steps",
                                            "1"), OFF, "", TURN_ON),
    "datatype: bf16 in the YAML, NEONLITE_BF16=off": (("train", "run.yaml", "-q"), OFF,
                                                      "datatype: bf16\n", TURN_ON),
    "eval of a bf16 checkpoint, NEONLITE_BF16=off": (("eval", "model.h5"), OFF, "", TURN_ON),
    "--resume a bf16 checkpoint, NEONLITE_BF16=off": (("train", "--resume", "model.h5", "-e",
                                                       "2", "-q"), OFF, "", TURN_ON),
    "train -d bf16, NEONLITE_BF16=sometimes": (("train", "run.yaml", "-q", "-d", "bf16"),
                                               {"NEONLITE_BF16": "sometimes"}, "",
                                               "expected one of compute, storage, off"),
}


@pytest.mark.parametrize("attack", list(CASES))
def test_a_data_type_the_cpu_cannot_give_is_one_line_before_any_work(attack, made, table):
    args, env, extra, phrase = CASES[attack]
    (made / "run.yaml").write_text(RUN + extra)
    try:
        result, before, after = refused_case(table, attack, neonlite_argv(*args), made,
                                             env=env)
    finally:
        (made / "run.yaml").write_text(RUN)
    assert result.outcome == "one-line error", (result.outcome, result.stderr[-2000:])
    assert phrase in result.message, result.message
    assert after == before, f"{attack}: the folder changed: {set(after) ^ set(before)}"
