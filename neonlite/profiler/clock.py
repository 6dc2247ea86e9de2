"""Time stamps for the profiler: the host clock, or CUDA events on the GPU backend.

A clock's ``stamp()`` returns an opaque mark taken now; ``seconds(mark)`` turns it into
seconds on the host's ``time.perf_counter`` scale once the work is done (``resolve()`` first
waits for the device).  On the GPU backend a mark is a CUDA event recorded on the compute
stream, so a span measures the device work queued between its two marks, not the time the
host took to launch it.
"""
import time


class HostClock:
    """``time.perf_counter`` marks (the CPU backend: every op runs synchronously)."""

    kind = "host"

    def stamp(self):
        return time.perf_counter()

    def resolve(self):
        """Nothing to wait for on the host."""

    def seconds(self, mark):
        return mark


class CudaEventClock:
    """CUDA events on the backend's compute stream, mapped onto the host clock through one
    origin event recorded (after a synchronize) at a known host time.

    Written for the GPU backend (``backend.compute_event()``); compiled and emulated code
    paths only where no GPU is present."""

    kind = "cuda-events"

    def __init__(self, backend):
        self.backend = backend
        backend.synchronize()
        self.origin = backend.compute_event()
        self.origin.synchronize()
        self.origin_host = time.perf_counter()

    def stamp(self):
        return self.backend.compute_event()

    def resolve(self):
        self.backend.synchronize()

    def seconds(self, mark):
        return self.origin_host + self.origin.time_till(mark) * 1e-3


def clock_for(backend):
    """The clock that measures ``backend``'s work: CUDA events on the GPU backend."""
    if getattr(backend, "name", None) == "gpu" and hasattr(backend, "compute_event"):
        return CudaEventClock(backend)
    return HostClock()
