"""The fused attention op on bf16 tensors against float32, as ratios: ``python -m
benchmarks.bf16_attention [--reps 15] [--rounds 7] [--shapes gpt512,nanogpt,nanogpt_T64]
[--clock wall|cpu]``.

Each shape runs ``attention`` and ``attention_bprop`` on a causal self-attention layer's
operands (q, k, v the token-major (N, T, H, dh) views of one (N, T, 3 d_model) projection,
out and dout views of the merged (N, T, d_model) rows, lse float32), on three backends: float32,
bf16 (the kernels' bf16 entry points), and bf16 through the bf16 boundary's widening and
narrowing (the way before them, forced).  The rounds alternate the three, ``reps`` calls each,
and the table gives each pass's median ms per call and the bf16 / float32 ratios of the
medians.  ``--clock cpu`` times the process's CPU time instead of the wall clock: on a machine
shared with other work, with ``OMP_NUM_THREADS=1``, it leaves out the time the process waits
for a core.  Shapes: gpt512 (``examples/gpt512_bf16.yaml``: batch 16, T 128, 8 heads of 64),
nanogpt (``examples/char_transformer.yaml``: batch 32, T 128, 4 heads of 32) and nanogpt_T64
(the same at T 64).
"""
import argparse
import time

import numpy as np

#: name: (batch, T, d_model, heads)
SHAPES = {"gpt512": (16, 128, 512, 8), "nanogpt": (32, 128, 128, 4),
          "nanogpt_T64": (32, 64, 128, 4)}
WAYS = ("f32", "bf16", "bf16 widened")


def _operands(be, N, T, d, heads, rng):
    """q, k, v, out, lse, dout, dq, dk, dv as the layer passes them."""
    dh = d // heads
    proj = be.array(rng.standard_normal((N, T, 3 * d)).astype(np.float32))
    dproj = be.zeros((N, T, 3 * d))
    of, dof = be.zeros((N, T, d)), be.array(rng.standard_normal((N, T, d)).astype(np.float32))
    view = proj.reshape(N, T, 3 * heads, dh)
    dview = dproj.reshape(N, T, 3 * heads, dh)
    q, k, v = (be.keep(view[:, :, i * heads:(i + 1) * heads]) for i in range(3))
    dq, dk, dv = (be.keep(dview[:, :, i * heads:(i + 1) * heads]) for i in range(3))
    lse = be.zeros((N * heads, T), dtype=np.float32)
    return (q, k, v, be.keep(of.reshape(N, T, heads, dh)), lse,
            be.keep(dof.reshape(N, T, heads, dh)), dq, dk, dv)


def _calls(way, N, T, d, heads):
    """(forward, backward) calls of one way on a backend of its own."""
    import neonlite
    be = neonlite.gen_backend("cpu", batch_size=N, rng_seed=0,
                              datatype=np.float32 if way == "f32" else "bf16")
    q, k, v, out, lse, dout, dq, dk, dv = _operands(be, N, T, d, heads,
                                                    np.random.default_rng(0))
    scale = (d // heads) ** -0.5
    if way == "bf16 widened":  # the boundary given no section call: it widens and narrows
        from neonlite.backends.cpu.bf16_boundary import Bf16Boundary
        boundary = be.bf16_boundary
        boundary.run_row = lambda op, operands, scalars, run, call=None: \
            Bf16Boundary.run_row(boundary, op, operands, scalars, run)

    def forward():
        be.attention(q, k, v, out, lse, scale, True, None, None, None, heads)

    def backward():
        be.attention_bprop(q, k, v, out, lse, dout, dq, dk, dv, scale, True, None, None,
                           None, heads)
    forward()
    backward()
    return forward, backward


def _time(call, reps, clock):
    start = clock()
    for _ in range(reps):
        call()
    return (clock() - start) / reps * 1e3


def measure(shape, reps, rounds, clock=time.perf_counter):
    """{(way, pass): median ms per call} of ``shape``."""
    N, T, d, heads = SHAPES[shape]
    calls = {way: _calls(way, N, T, d, heads) for way in WAYS}
    times = {(way, p): [] for way in WAYS for p in ("attention", "attention_bprop")}
    for _ in range(rounds):
        for way in WAYS:
            forward, backward = calls[way]
            times[(way, "attention")].append(_time(forward, reps, clock))
            times[(way, "attention_bprop")].append(_time(backward, reps, clock))
    return {key: float(np.median(v)) for key, v in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args(argv)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    shapes = args.shapes.split(",")
    for shape in shapes:
        if shape not in SHAPES:
            parser.error(f"--shapes: unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    print(f"{'shape':12} {'pass':16} " + " ".join(f"{w:>13}" for w in WAYS) +
          "  bf16/f32  widened/f32")
    for shape in shapes:
        found = measure(shape, args.reps, args.rounds, clock)
        for p in ("attention", "attention_bprop"):
            ms = [found[(w, p)] for w in WAYS]
            print(f"{shape:12} {p:16} " + " ".join(f"{m:10.3f} ms" for m in ms) +
                  f"  {ms[1] / ms[0]:8.3f}  {ms[2] / ms[0]:11.3f}")


if __name__ == "__main__":
    main()
