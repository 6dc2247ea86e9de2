"""The issue-6 GPU benchmark rows: registered, importable without a GPU, the ResNet-20 model
they time builds on the CPU backend, and (on a GPU only) the smoke run of every GPU row."""
import json

import numpy as np
from support.requires import need

import neonlite
from benchmarks.run import main
from benchmarks.workloads import GPU_WORKLOADS, WORKLOADS, gpu_conv, gpu_resnet20

ISSUE6 = ["conv3x3_64_bf16_fprop", "conv3x3_64_bf16_bprop", "conv3x3_64_bf16_update",
          "conv3x3_256_bf16_fprop", "conv1x1_256_64_bf16_fprop", "conv3x3_64_f32_fprop",
          "conv3x3_256_f32_update", "conv1x1_256_64_f32_bprop", "bn_relu_bf16",
          "softmax_ce_bf16", "resnet20_bf16"]


def test_issue6_rows_are_gpu_only_workloads():
    assert set(ISSUE6) <= set(GPU_WORKLOADS)
    assert not set(ISSUE6) & set(WORKLOADS)
    assert len(gpu_conv.ALL) == 18


def test_resnet20_model_shapes_on_the_cpu_backend():
    from neonlite.layers import GeneralizedCost
    from neonlite.transforms import CrossEntropyMulti
    from benchmarks.workloads.common import FixedBatch
    previous = neonlite.backends._current
    try:
        neonlite.gen_backend("cpu", batch_size=2, rng_seed=0)
        model = gpu_resnet20._model()
        model.initialize(FixedBatch((32, 32, 3), (10,)), GeneralizedCost(CrossEntropyMulti()))
        assert model.out_shape == (10,)
        convs = [p for p in model.parameters() if p.value.ndim == 4]
        assert len(convs) == 21  # 19 3x3 convolutions and 2 1x1 projections
        assert sum(p.value.size for p in model.parameters()) in range(270_000, 275_000)
    finally:
        neonlite.backends._current = previous


def test_gpu_rows_smoke(tmp_path):
    need("gpu")
    out = tmp_path / "gpu.json"
    assert main(["--backend", "gpu", "--smoke", "--only", ",".join(ISSUE6), "--json",
                 str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["workload"] for r in rows] == ISSUE6
    assert all(np.isfinite(r["neonlite"]) and r["neonlite"] > 0 for r in rows)
