"""Hostile input to the CPU backend's bfloat16 API and its switches: each case in its own
process under a time and memory bound (``support.isolated``); the table (attack -> outcome ->
seconds, peak MiB, message) is written to ``bf16_attacks.tsv`` in the module's temporary
folder.  Bad operands of ``dot_bf16`` and a bad ``NEONLITE_BF16`` are one line each, never a
traceback or a bf16 instruction on a CPU said to lack them; a huge product allocates nothing
beyond its operands before it is refused; ``gen_backend('cpu', float16)`` is refused with its
reason."""
import pytest
from support.isolated import AttackTable, neonlite_argv, python_argv, run_isolated
from support.requires import requires

pytestmark = requires("compiler")
MEMORY_MIB = 1024
SECONDS = 120


#: the backend ops' checks raise ValueError (as ``compound_dot``'s do); a script that prints
#: it as the CLI prints errors shows it is one line
CATCH = ("import sys\nimport numpy as np\nimport neonlite\n"
         "try:\n    {setup}\n    {body}\n"
         "except ValueError as err:\n"
         "    print(f'neonlite: error: {{err}}', file=sys.stderr)\n    sys.exit(1)\n")


def guarded(body, setup="be = neonlite.gen_backend('cpu', batch_size=1)"):
    """``python -c``: ``body`` after ``setup``, a ValueError printed as one error line."""
    return python_argv(CATCH.format(setup=setup, body=body))


BITS = "np.zeros((4, 5), np.uint16)"
C44 = "np.zeros((4, 4), np.float32)"
# attack -> (argv, environment, phrase of the one line)
CASES = {
    "dot_bf16 of float32 operands": (
        guarded(f"be.dot_bf16(np.zeros((4, 5), np.float32), {BITS}.T.copy(), {C44})"), {},
        "A must be a 2-D uint16"),
    "dot_bf16 of mismatched shapes": (
        guarded(f"be.dot_bf16({BITS}, {BITS}, {C44})"), {}, "op(A) is 4x5, op(B) 4x5"),
    "dot_bf16 of a strided view": (
        guarded(f"be.dot_bf16({BITS}[:, ::2], np.zeros((3, 4), np.uint16), {C44})"), {},
        "unit-stride rows"),
    "dot_bf16 of a 1-D operand": (
        guarded(f"be.dot_bf16(np.zeros(20, np.uint16), {BITS}, {C44})"), {},
        "A must be a 2-D uint16"),
    "dot_bf16 of a float64 C": (
        guarded(f"be.dot_bf16({BITS}, {BITS}.T.copy(), np.zeros((4, 4)))"), {},
        "C must be a 2-D float32"),
    "dot_bf16 of a 2**16 x 2**16 broadcast view (16 GiB widened)": (
        guarded("big = np.broadcast_to(np.zeros(2**16, np.uint16), (2**16, 2**16)); "
                "be.dot_bf16(big, np.zeros((2**16, 1), np.uint16), "
                "np.zeros((2**16, 1), np.float32), path='storage')"), {}, "do not overlap"),
    "dot_bf16 path 'fast'": (
        guarded(f"be.dot_bf16({BITS}, {BITS}.T.copy(), {C44}, path='fast')"), {},
        "path must be compute or storage"),
    "dot_bf16 compute on a CPU said to lack AVX512-BF16": (
        guarded(f"be.dot_bf16({BITS}, {BITS}.T.copy(), {C44}, path='compute')"),
        {"NEONLITE_CPU_FEATURES_OFF": "avx512_bf16,amx_bf16"}, "compute path cannot run here"),
    "NEONLITE_BF16=sometimes": (
        guarded(f"be.dot_bf16({BITS}, {BITS}.T.copy(), {C44})"),
        {"NEONLITE_BF16": "sometimes"}, "expected one of compute, storage, off"),
    "NEONLITE_BF16=off then dot_bf16": (
        guarded(f"be.dot_bf16({BITS}, {BITS}.T.copy(), {C44})"), {"NEONLITE_BF16": "off"},
        "bf16 is off here"),
    "gen_backend cpu float16": (
        guarded("pass", setup="neonlite.gen_backend('cpu', batch_size=1, datatype=np.float16)"),
        {}, "150 times slower"),
}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return AttackTable(tmp_path_factory.mktemp("bf16") / "bf16_attacks.tsv")


@pytest.mark.parametrize("attack", list(CASES))
def test_bad_bf16_input_is_one_line(attack, table, tmp_path):
    argv, env, phrase = CASES[attack]
    result = table.add(attack, run_isolated(argv, cwd=tmp_path, env=env,
                                            memory_mib=MEMORY_MIB, seconds=SECONDS))
    assert result.outcome == "one-line error", (result.outcome, result.stderr[-2000:])
    assert phrase in result.message, result.message


def test_doctor_with_a_bad_neonlite_bf16_is_a_warning_row_not_an_error(table, tmp_path):
    result = table.add("doctor with NEONLITE_BF16=sometimes", run_isolated(
        neonlite_argv("doctor"), cwd=tmp_path, env={"NEONLITE_BF16": "sometimes"},
        memory_mib=MEMORY_MIB, seconds=SECONDS))
    assert result.outcome == "success", (result.outcome, result.stderr[-2000:])
    assert "NEONLITE_BF16='sometimes'" in result.stdout
