"""The parts of data-parallel training that need no MPI: shards, buckets, dropout masks per
global example, the world of one, and the NCCL binding's declarations."""
import numpy as np
import pytest

import neonlite
from neonlite.data import ArrayIterator
from neonlite.distributed import World, detect_world, launched_by_mpi, shard
from neonlite.distributed.buckets import plan_buckets
from neonlite.backends.philox import example_masks


def test_shards_are_disjoint_and_make_up_the_global_batch():
    X = np.arange(40, dtype=np.float64).reshape(40, 1)
    neonlite.gen_backend("cpu", batch_size=16, rng_seed=3)
    whole = [x.get()[:, 0].copy() for x, _ in ArrayIterator(X, X[:, 0] * 0 + 1)]
    parts = []
    for rank in range(4):
        neonlite.gen_backend("cpu", batch_size=4, rng_seed=3)
        it = shard(ArrayIterator(X, X[:, 0] * 0 + 1), World(rank, 4))
        parts.append([x.get()[:, 0].copy() for x, _ in it])
    assert len(parts[0]) == len(whole) == 3
    for b, batch in enumerate(whole):
        assert np.array_equal(np.concatenate([p[b] for p in parts]), batch)
    first_epoch = np.concatenate([p[0] for p in parts] + [p[1] for p in parts])
    assert len(set(first_epoch)) == 32


def test_dropout_masks_do_not_depend_on_the_split():
    whole = example_masks((8, 3, 5), 0.6, key=11, step=4, stream=7, first=0)
    halves = [example_masks((4, 3, 5), 0.6, key=11, step=4, stream=7, first=f) for f in (0, 4)]
    assert np.array_equal(np.concatenate(halves), whole)
    assert set(np.unique(whole)) <= {0.0, 1 / 0.6}
    assert not np.array_equal(whole, example_masks((8, 3, 5), 0.6, 11, 5, 7, 0))


def test_buckets_follow_the_given_order_and_size():
    class P:
        def __init__(self, n):
            self.grad = np.zeros(n, dtype=np.float32)
    params = [P(n) for n in (10, 300, 5, 5, 1000, 2)]
    buckets = plan_buckets(params, bucket_bytes=1024)
    assert [len(b) for b in buckets] == [2, 3, 1]
    assert [p for b in buckets for p in b] == params
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets(params, 0)


def test_a_plain_process_is_a_world_of_one(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(var, raising=False)
    world = detect_world()
    assert (world.rank, world.size, world.comm) == (0, 1, None)
    assert launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "4"})
    with pytest.raises(Exception, match="does not split across 3 ranks"):
        World(0, 3).split_batch(128)


def test_nccl_declarations_parse_and_a_missing_library_is_one_clear_error(monkeypatch):
    pytest.importorskip("cffi")
    from neonlite.distributed import nccl
    assert nccl.ffi().sizeof("ncclUniqueId") == 128
    monkeypatch.setenv("NEONLITE_NCCL", "/nonexistent/libnccl.so.2")
    monkeypatch.setattr(nccl, "_lib", {})
    with pytest.raises(nccl.NcclError, match="NCCL is not installed"):
        nccl.load()
    assert not nccl.nccl_available()


def test_ranks_sharing_every_core_get_disjoint_shares():
    from neonlite.distributed.cores import plan_core_share
    free = [(0, 1, 2, 3)] * 2
    assert plan_core_share(free, 0) == (0, 1)
    assert plan_core_share(free, 1) == (2, 3)
    assert plan_core_share([(0, 1, 2)] * 3, 2) == (2,)
    assert plan_core_share([(0, 1, 2, 3, 4)] * 2, 1) == (2, 3)


def test_ranks_bound_apart_or_outnumbering_the_cores_are_left_alone():
    from neonlite.distributed.cores import plan_core_share
    assert plan_core_share([(0,), (1,)], 0) is None
    assert plan_core_share([(0, 1)] * 3, 1) is None
    assert plan_core_share([(0, 1), (2, 3), (2, 3)], 0) is None
    assert plan_core_share([(0, 1), (2, 3), (2, 3)], 2) == (3,)


def test_set_cpu_threads_changes_the_openmp_thread_count():
    import ctypes
    from neonlite.backends.cpu.threads import set_cpu_threads
    gomp = ctypes.CDLL("libgomp.so.1")
    before = gomp.omp_get_max_threads()
    try:
        assert "openmp" in set_cpu_threads(1)
        assert gomp.omp_get_max_threads() == 1
        set_cpu_threads(3)
        assert gomp.omp_get_max_threads() == 3
    finally:
        set_cpu_threads(before)
    with pytest.raises(ValueError, match="at least 1"):
        set_cpu_threads(0)


def test_moments_of_row_groups_combine_into_the_whole_batch():
    from neonlite.distributed.sync_bn import combine_moments
    rng = np.random.default_rng(4)
    x = rng.normal(size=(1001, 6)) * 0.01 + 1e4
    groups = np.split(x, [1, 300, 301, 800])
    rows = [np.concatenate([[len(g)], g.mean(axis=0), np.square(g - g.mean(axis=0)).sum(0)])
            for g in groups]
    count, mean, m2 = combine_moments(rows)
    assert count == 1001
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-15)
    np.testing.assert_allclose(m2, np.square(x - x.mean(axis=0)).sum(axis=0), rtol=1e-9)


def test_batch_norm_statistics_do_not_depend_on_the_split():
    """The CPU kernel's moments of two halves, combined, give batchnorm_fprop's own mean and
    invstd of the whole batch to the last float32 bit: what lets N ranks with synchronised
    batch norm normalize exactly as one process does."""
    from neonlite.distributed.sync_bn import combine_moments
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    if be.kernels.module("norm", np.dtype(np.float32)) is None:
        pytest.skip("the CPU backend runs on numpy alone here (no C compiler): its float32 "
                    "batch norm statistics are numpy's, not the kernel's")
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(4096, 32)) * rng.uniform(0.01, 3, 32) + rng.normal(size=32) * 5)
    x = x.astype(np.float32)
    C = 32
    mean, invstd = be.empty((1, C)), be.empty((1, C))
    be.batchnorm_fprop(be.array(x), be.ones((1, C)), be.zeros((1, C)), be.empty(x.shape),
                       be.empty(x.shape), mean, invstd, be.zeros((1, C)), be.ones((1, C)))
    rows = [np.concatenate([[len(h)], *be.batchnorm_moments(be.array(np.ascontiguousarray(h)))])
            for h in np.split(x, [1500])]
    count, mu, m2 = combine_moments(rows)
    assert np.array_equal(mu.astype(np.float32), mean.get().reshape(-1))
    assert np.array_equal((1.0 / np.sqrt(m2 / count + 1e-5)).astype(np.float32),
                          invstd.get().reshape(-1))
