"""What float16 costs on the CPU backend, shared by the backend that refuses it and the CLI
that explains the refusal."""

#: how many times slower numpy's float16 emulation runs the quick start on the CPU than
#: float32 (benchmarks/ measures it): the reason the cpu backend refuses float16 unless asked
#: for numpy's slow path (``numpy_float16=True``), and the CLI's ``-d f16`` on the CPU
CPU_F16_SLOWDOWN = 150
