"""Kernel cache keys do not depend on which thread computes them, nor when.

Every input of a key (the Python extension suffix, the cffi version, the compiler's version and
target, the flags) is a value computed once per process before any build thread starts
(:class:`~neonlite.kernels.toolchain.KeyInputs`).  Before that, a fresh process whose threads
asked ``sysconfig`` for ``EXT_SUFFIX`` at the same moment could get None in one of them (its
key then fell back to another value), so a build wrote an entry under a key that
``neonlite kernels list`` reports as not cached.

* 30 fresh processes, each computing every variant's key (CPU, and CUDA for the default archs
  where nvcc runs) from 4 threads at once: every thread of every process agrees.
* 10 fresh ``neonlite kernels build`` runs on a temporary cache (seeded with a copy of the
  warm cache): each leaves exactly one entry per CPU variant, and ``neonlite kernels list``
  reports every variant 'cached'.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from neonlite.kernels import specs
from neonlite.kernels.build import default_builder
from neonlite.kernels.cache import entry_name
from support.requires import requires

PROCESSES, THREADS, BUILDS = 30, 4, 10

KEYS_FROM_THREADS = f"""
import json, threading
from neonlite.kernels import specs
from neonlite.kernels.build import Builder
from neonlite.kernels.toolchain import CompilerNotFound, find_nvcc
builder = Builder()
try:
    find_nvcc()
    cuda = True
except CompilerNotFound:
    cuda = False
barrier, found = threading.Barrier({THREADS}), [None] * {THREADS}

def keys():
    out = {{}}
    for spec in specs.variants():
        if spec.target == "cpu":
            out[spec.name] = builder.cpu_key(spec)
        elif cuda:
            for arch in specs.DEFAULT_CUDA_ARCHS:
                out[spec.name + "/" + arch] = builder.cuda_key(spec, arch)
    return out

def work(index):
    barrier.wait()
    found[index] = keys()
threads = [threading.Thread(target=work, args=(i,)) for i in range({THREADS})]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({{"threads": found, "serial": keys()}}))
"""


def _nvcc_runs():
    from neonlite.kernels.toolchain import CompilerNotFound, find_nvcc
    try:
        find_nvcc()
    except CompilerNotFound:
        return False
    return True


def _fresh_process(code, env=None, timeout=300):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@requires("compiler")
def test_30_fresh_processes_compute_every_key_alike_from_4_threads():
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = [json.loads(out) for out in pool.map(lambda _: _fresh_process(KEYS_FROM_THREADS),
                                                       range(PROCESSES))]
    reference = results[0]["serial"]
    cpu_names = {spec.name for spec in specs.variants("cpu")}
    assert cpu_names <= set(reference)
    if _nvcc_runs():
        assert len(reference) == len(cpu_names) + len(specs.variants("cuda")) * \
            len(specs.DEFAULT_CUDA_ARCHS)
    disagreeing = [i for i, result in enumerate(results)
                   if any(keys != result["serial"] for keys in result["threads"])]
    assert not disagreeing, f"in {len(disagreeing)} of {PROCESSES} fresh processes a " \
        f"thread computed other keys than the serial ones"
    assert all(result["serial"] == reference for result in results), \
        "fresh processes computed different keys"


@pytest.fixture(scope="module")
def warm_entries():
    """The default cache's entries of every CPU variant as this checkout keys them (built
    there first where one is missing); the cache may hold other sources' entries too."""
    builder = default_builder()
    results = builder.build_all("cpu", jobs=2)
    assert all(r.status != "failed" for r in results), [str(r.error) for r in results
                                                         if r.status == "failed"]
    return [builder.cache.path(entry_name(spec.name, builder.cpu_key(spec), ".so"))
            for spec in specs.variants("cpu")]


def _entries_per_variant(folder):
    counts = {spec.name: 0 for spec in specs.variants("cpu")}
    for path in folder.iterdir():
        found = re.fullmatch(r"(.+)-[0-9a-f]{24}\.so", path.name)
        if found and found.group(1) in counts:
            counts[found.group(1)] += 1
    return counts


@requires("compiler")
def test_10_fresh_kernels_builds_leave_one_cached_entry_per_variant(tmp_path, warm_entries):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    for path in warm_entries:
        shutil.copyfile(path, cache / path.name)
    env = dict(os.environ, NEONLITE_CACHE_DIR=str(cache))
    cli = [sys.executable, "-m", "neonlite.cli", "kernels"]
    for run in range(BUILDS):
        build = subprocess.run([*cli, "build", "--target", "cpu", "-j", str(THREADS)],
                               capture_output=True, text=True, env=env, timeout=900,
                               stdin=subprocess.DEVNULL)
        assert build.returncode == 0, build.stdout + build.stderr
        counts = _entries_per_variant(cache)
        assert set(counts.values()) == {1}, f"build {run + 1}: entries per variant {counts}"
        listed = subprocess.run([*cli, "list", "--target", "cpu"], capture_output=True,
                                text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
        assert listed.returncode == 0, listed.stderr
        rows = [line for line in listed.stdout.splitlines()[2:] if line.strip()]
        assert len(rows) == len(specs.variants("cpu"))
        assert all(row.rstrip().endswith("cached") and "not cached" not in row
                   for row in rows), f"build {run + 1}:\n{listed.stdout}"
