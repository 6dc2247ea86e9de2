"""The GPU backend's CUDA kernels without a GPU: every variant of ``kernels/cuda_specs.py``
compiles with nvcc for sm_80 and sm_90 through the kernel build system, and the Philox
generator (the source of dropout masks) gives Random123's known answers and the numpy
reference's stream on the host emulator."""

import numpy as np
import pytest
from support.cuda_host_emulator import HostModule
from support.requires import requires

from neonlite.backends import philox
from neonlite.kernels import cuda_specs, specs
from neonlite.kernels.build import Builder

# Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter, key, expected.
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


@pytest.mark.slow
@requires("nvcc")
def test_every_cuda_variant_compiles_for_sm80_and_sm90():
    """Minutes on a cold cache (the tensor-core convolution kernels dominate), seconds after."""
    results = Builder().build_all(target="cuda", archs=("sm_80", "sm_90"), jobs=2,
                                  variants=cuda_specs.CUDA_VARIANTS)
    failed = [f"{r.spec.name} {r.arch}: {r.error}" for r in results if r.status == "failed"]
    assert not failed, "\n".join(failed)
    assert len(results) == 2 * len(cuda_specs.CUDA_VARIANTS)
    binary = Builder().cuda_binary(specs.find("pool"), "sm_80")
    for name in specs.find("pool").functions:
        assert name.encode() in binary.cubin, f"{name} missing from the pool cubin"


def test_every_cuda_source_is_in_the_table():
    listed = {spec.source for spec in cuda_specs.CUDA_VARIANTS}
    on_disk = {f"cuda/{p.name}" for p in specs.find("pool").root.joinpath("cuda").glob("*.cu")}
    assert listed == on_disk


def test_numpy_philox_known_answers():
    for counter, key, expected in KAT:
        got = philox.philox4x32_10(np.array(counter, np.uint32), np.array(key, np.uint32))
        assert tuple(int(v) for v in got) == expected


@requires("emulator")
def test_philox_kernel_matches_known_answers_and_numpy_stream():
    source = specs.find("philox").source_path.read_text()
    header = (specs.find("philox").source_path.parent / "neonlite_common.cuh").read_text()
    generator = (specs.find("philox").source_path.parent / "philox.cuh").read_text()
    module = HostModule([generator, source], {"nl_philox_words": 4, "nl_uniform_f32": 8},
                        prelude=header)
    ctr = np.array([c for c, _, _ in KAT], np.uint32).reshape(-1)
    key = np.array([k for _, k, _ in KAT], np.uint32).reshape(-1)
    words = np.zeros(12, np.uint32)
    module.launch("nl_philox_words", (1,), (4,), [words, ctr, key, 3])
    assert [tuple(int(w) for w in words[4 * i:4 * i + 4]) for i in range(3)] == \
        [e for _, _, e in KAT]
    n, seed, base = 1001, 1234567890123, 77
    out = np.zeros(n, np.float32)
    lo, hi = philox.seed_key(seed)
    module.launch("nl_uniform_f32", (2,), (32,), [out, n, lo, hi, base & 0xFFFFFFFF, base >> 32,
                                                  0.0, 1.0])
    np.testing.assert_array_equal(out, philox.uniform(n, seed, base))
    assert 0.0 <= out.min() and out.max() < 1.0 and abs(out.mean() - 0.5) < 0.05


@requires("emulator")
def test_example_mask_kernel_is_the_numpy_per_example_stream():
    """nl_example_mask_f32 gives philox.example_masks bit for bit: rows of a width that is not
    a multiple of 4, a 64-bit first example, any launch size."""
    spec = specs.find("philox")
    header = (spec.source_path.parent / "neonlite_common.cuh").read_text()
    module = HostModule([(spec.source_path.parent / "philox.cuh").read_text(),
                         spec.source_path.read_text()], {"nl_example_mask_f32": 11},
                        prelude=header)
    rows, per, first, key, keep = 5, 23, 2**32 + 9, 2**35 + 17, 0.7
    want = philox.example_masks((rows, per), keep, key, 6, 99, first).astype(np.float32)
    for grid, block in (((1,), (8,)), ((3,), (32,))):
        out = np.full((rows, per), -1.0, np.float32)
        lo, hi = philox.seed_key(key)
        module.launch("nl_example_mask_f32", grid, block,
                      [out, rows, per, first & 0xFFFFFFFF, first >> 32, 6, 99, lo, hi,
                       np.float32(keep), np.float32(1 / keep)])
        np.testing.assert_array_equal(out, want)


@requires("emulator")
def test_scatter_add_rows_is_the_in_order_sum_and_reports_bad_ids():
    """Repeated ids summed in position order (bit-exact with a sequential float32 loop) with the
    work split over columns and id classes, for any launch size; a bad id is reported."""
    spec = specs.find("rows")
    header = (spec.source_path.parent / "neonlite_common.cuh").read_text()
    module = HostModule([spec.source_path.read_text()], {"nl_scatter_add_rows_f32_i32": 7},
                        prelude=header)
    rng = np.random.default_rng(3)
    V, D, S = 9, 5, 40
    ids = rng.integers(0, V, S).astype(np.int32)
    ids[:6] = 4
    rows = (rng.normal(size=(S, D)) * 10.0 ** rng.integers(-3, 4, (S, 1))).astype(np.float32)
    want = np.ones((V, D), np.float32)
    for s in range(S):
        want[ids[s]] += rows[s]
    for grid, block in (((1,), (4,)), ((3,), (32,)), ((2,), (64,))):
        got, bad = np.ones((V, D), np.float32), np.array([S], np.uint64)
        module.launch("nl_scatter_add_rows_f32_i32", grid, block, [got, rows, ids, S, V, D, bad])
        np.testing.assert_array_equal(got, want)
        assert int(bad[0]) == S
    ids[7] = V
    got, bad = np.ones((V, D), np.float32), np.array([S], np.uint64)
    module.launch("nl_scatter_add_rows_f32_i32", (2,), (32,), [got, rows, ids, S, V, D, bad])
    assert int(bad[0]) == 7
