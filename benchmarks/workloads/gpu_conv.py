"""GPU convolution passes, each timed on its own: neonlite's implicit-GEMM kernels against
cuDNN (``torch.ops.aten.convolution_backward`` for the two gradients, channels-last tensors,
``cudnn.benchmark`` on, TF32 off for float32) on the same device.  Shapes (issue 6): 3x3
64->64 on 56x56, 3x3 256->256 on 14x14 (padding 1) and 1x1 256->64 on 56x56, batch 64, in
bfloat16 and float32; fprop, bprop (data gradient) and update (weight gradient).  Figure:
GFLOP/s (2*N*P*Q*K*R*S*C per pass).  GPU only (``--backend gpu``); smoke: batch 2, 8x8."""
import numpy as np

FIGURE = "GFLOP/s"
SHAPES = {"conv3x3_64": (64, 56, 3, 64, 1), "conv3x3_256": (256, 14, 3, 256, 1),
          "conv1x1_256_64": (256, 56, 1, 64, 0)}  # C, H=W, R=S, K, padding
PASSES = ("fprop", "bprop", "update")


def _dims(shape, smoke):
    C, H, R, K, pad = SHAPES[shape]
    return (2, 8) if smoke else (64, H), C, R, K, pad


def _make(shape, dtype_name, pass_name):
    def neonlite(make_backend, smoke):
        from neonlite import gen_backend
        (N, H), C, R, K, pad = _dims(shape, smoke)
        be = gen_backend("gpu", batch_size=N, rng_seed=0,
                         datatype="bf16" if dtype_name == "bf16" else np.float32)
        rng = np.random.default_rng(0)
        plan = be.conv_layer(N, C, H, H, K, R, R, (pad, pad))
        x = be.array(rng.standard_normal(plan.in_shape, dtype=np.float32))
        f = be.array(rng.standard_normal(plan.filter_shape, dtype=np.float32) * 0.05)
        e = be.array(rng.standard_normal(plan.out_shape, dtype=np.float32))
        o, gi, gf = be.empty(plan.out_shape), be.empty(plan.in_shape), be.empty(plan.filter_shape)
        step = {"fprop": lambda: be.fprop_conv(plan, x, f, o),
                "bprop": lambda: be.bprop_conv(plan, f, e, gi),
                "update": lambda: be.update_conv(plan, x, e, gf)}[pass_name]
        return step, plan.flops() / 1e9

    def torch(device, smoke):
        import torch
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        (N, H), C, R, K, pad = _dims(shape, smoke)
        dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
        cl = torch.channels_last
        x = torch.randn(N, C, H, H, device=device, dtype=dtype).to(memory_format=cl)
        w = (torch.randn(K, C, R, R, device=device, dtype=dtype) * 0.05).to(memory_format=cl)
        out = torch.nn.functional.conv2d(x, w, padding=pad)
        e = torch.randn_like(out).to(memory_format=cl)
        mask = {"fprop": None, "bprop": [True, False, False], "update": [False, True, False]}

        def step():
            if pass_name == "fprop":
                return torch.nn.functional.conv2d(x, w, padding=pad)
            return torch.ops.aten.convolution_backward(e, x, w, None, [1, 1], [pad, pad],
                                                       [1, 1], False, [0, 0], 1,
                                                       mask[pass_name])
        P = H + 2 * pad - R + 1
        return step, 2.0 * N * P * P * K * R * R * C / 1e9
    return neonlite, torch


class _Workload:
    def __init__(self, shape, dtype_name, pass_name):
        self.NAME = f"{shape}_{dtype_name}_{pass_name}"
        self.FIGURE = FIGURE
        self.neonlite, self.torch = _make(shape, dtype_name, pass_name)


ALL = tuple(_Workload(s, d, p) for d in ("bf16", "f32") for s in SHAPES for p in PASSES)
