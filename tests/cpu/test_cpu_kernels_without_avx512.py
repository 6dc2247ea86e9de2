"""The C kernels built without AVX-512, as on a CPU that has AVX2 and no AVX-512 (AMD Zen 2 and
Zen 3, Intel client parts): their vectors are 8 floats or 4 doubles, narrower than the 8-row
blocks of the attention's tile products (a narrower vector once left scores of hidden keys
unexponentiated there: NaN in float64's causal rows on a Zen 3), and the block-sparse tiles
are sized for 16 registers instead of 32.  On a machine with AVX-512 the kernels are built
again in a cache of the test's own, with ``-mno-avx512f`` after the compiler's command
(``NEONLITE_CC``), and the attention, block-sparse and direct-convolution tests run against
them in a child pytest."""
import os
import platform
import subprocess
import sys

import pytest
from support.harness import CHECKOUT

from neonlite.kernels.toolchain import CompilerNotFound, find_c_compiler

TESTS = CHECKOUT / "tests"
SELECTED = ["backend/test_attention_op.py::test_matches_the_reference_on_every_backend",
            "backend/test_attention_op.py::test_token_major_operands_match_head_major",
            "backend/test_blocksparse_ops.py", "cpu/test_cpu_conv_direct.py"]


def _compiler_without_avx512():
    """The C compiler's words with ``-mno-avx512f``, or a reason to skip."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None, f"-mno-avx512f is an x86 option; this machine is {platform.machine()}"
    try:
        words = list(find_c_compiler().command) + ["-mno-avx512f"]
    except CompilerNotFound as err:
        return None, f"no C compiler: {err}"
    macros = subprocess.run([*words, "-march=native", "-dM", "-E", "-x", "c", os.devnull],
                            capture_output=True, text=True, timeout=60, check=False)
    if macros.returncode != 0:
        return None, f"{words[0]} does not take -mno-avx512f: {macros.stderr.strip()[:200]}"
    assert "__AVX512F__" not in macros.stdout, f"{words} still enables AVX-512"
    return words, None


@pytest.mark.slow
def test_attention_blocksparse_and_direct_convolution_without_avx512(tmp_path):
    words, reason = _compiler_without_avx512()
    if words is None:
        pytest.skip(reason)
    env = dict(os.environ, NEONLITE_CC=" ".join(words), NEONLITE_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           "-p", "no:xdist", *SELECTED], cwd=TESTS, env=env,
                          capture_output=True, text=True, timeout=1200,
                          stdin=subprocess.DEVNULL, check=False)
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"the tests failed on kernels built without AVX-512:\n{tail}"
    assert " passed" in done.stdout and " skipped" not in done.stdout, tail
