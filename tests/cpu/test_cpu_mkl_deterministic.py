"""``NEONLITE_DETERMINISTIC=1`` puts neonlite's MKL in its strict reproducible mode: a GEMM
with a long inner dimension (where MKL splits the sums between threads) gives the same bits
on one MKL thread as on two, whichever way the GEMM tuner picks.  Each case runs in its own
process: MKL takes the mode only before its first computation, so a process where another
library's calls reached the same MKL first gets a warning."""
import json
import os
import subprocess
import sys

from support.requires import requires

pytestmark = requires("mkl")

GEMMS_ON_ONE_AND_TWO_THREADS = r"""
import json
import numpy as np
from neonlite.backends.cpu.mkl_blas import MKLGemm
gemm = MKLGemm()
rng = np.random.default_rng(0)
same = []
for m, k, n in ((256, 4096, 256), (128, 1024, 1024), (1, 4096, 256)):
    a, at = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, m), np.float32)
    b = rng.standard_normal((k, n), np.float32)
    for left in (a, at.T):
        outs = []
        for threads in (1, 2):
            previous = gemm.lib.MKL_Set_Num_Threads_Local(threads)
            outs.append(gemm.matmul(left, b, np.zeros((m, n), np.float32)))
            gemm.lib.MKL_Set_Num_Threads_Local(previous)
        same.append(bool(np.array_equal(*outs)))
print(json.dumps(same))
"""

LATE_REQUEST = r"""
import os, warnings
import cffi
import numpy as np
from neonlite.backends.cpu import mkl_blas
# another user of the same MKL library computes first
ffi = cffi.FFI()
ffi.cdef("void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, "
         "const float *, int, float, float *, int);")
other = ffi.dlopen(mkl_blas._candidates()[0])
a, c = np.ones((512, 512), np.float32), np.zeros((512, 512), np.float32)
pa, pc = ffi.cast("float *", a.ctypes.data), ffi.cast("float *", c.ctypes.data)
other.cblas_sgemm(101, 111, 111, 512, 512, 512, 1.0, pa, 512, pa, 512, 0.0, pc, 512)
os.environ["NEONLITE_DETERMINISTIC"] = "1"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mkl_blas.load_mkl()
print([str(w.message) for w in caught])
"""


def _run(script, **env):
    # -I: the checkout (the working directory) stays off sys.path, so the installed neonlite
    # is the one imported
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, **env))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_deterministic_gemms_give_the_same_bits_on_one_and_two_threads():
    same = _run(GEMMS_ON_ONE_AND_TWO_THREADS, NEONLITE_DETERMINISTIC="1",
                OMP_NUM_THREADS="2", MKL_NUM_THREADS="2")
    assert all(same), same


def test_asking_after_mkl_has_computed_elsewhere_is_a_warning():
    messages = _run(LATE_REQUEST, NEONLITE_DETERMINISTIC="0")
    assert any("strict reproducible mode" in m for m in messages), messages


LENET_STEPS = r"""
import hashlib, importlib.util, os, sys
import numpy as np
# the checkout's benchmarks package, as tests/conftest.py loads it (the checkout itself is
# not put on sys.path: its neonlite/ folder is not the installed package)
where = os.environ["BENCHMARKS_DIR"]
spec = importlib.util.spec_from_file_location("benchmarks", os.path.join(where, "__init__.py"),
                                              submodule_search_locations=[where])
sys.modules["benchmarks"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sys.modules["benchmarks"])
from neonlite.backends import gen_backend
from neonlite.optimizers import GradientDescentMomentum
from benchmarks.workloads.common import random_batch
from benchmarks.workloads.lenet import lenet_model
be = gen_backend("cpu", batch_size=128, datatype=np.float32, rng_seed=0)
model = lenet_model()
x, t = random_batch(be, (28, 28, 1), 10)
opt = GradientDescentMomentum(0.01, momentum_coef=0.9, wdecay=1e-4)
for _ in range(3):
    model.train_step(x, t, opt, 0)
digest = hashlib.sha256()
for p in model.parameters():
    digest.update(np.ascontiguousarray(p.value.get()).tobytes())
print('"' + digest.hexdigest() + '"')
"""


def test_lenet_training_is_the_same_on_one_and_two_threads():
    """Three LeNet train steps (batch 128: convolutions, pooling, batch norm, GEMMs with a
    long inner dimension) end with the same parameters, to the bit, on one thread and two."""
    import benchmarks
    where = os.path.dirname(benchmarks.__file__)
    digests = [_run(LENET_STEPS, NEONLITE_DETERMINISTIC="1", OMP_NUM_THREADS=str(n),
                    MKL_NUM_THREADS=str(n), BENCHMARKS_DIR=where) for n in (1, 2)]
    assert digests[0] == digests[1]
