"""The profiler on the GPU backend's own code with the device replaced by the host emulator
(``gpu_host_backend``): spans are stamped with CUDA events on the compute stream
(``CudaEventClock``), ops carry cuBLAS / generated-kernel names.  Compiled and emulated, not
run on a GPU: this checks the event plumbing and the structure, not device times."""
import numpy as np
from support.gpu_host_backend import host_gpu_backend
from support.requires import requires

import neonlite

pytestmark = requires("emulator")


def test_profile_on_the_emulated_gpu_uses_cuda_events(monkeypatch, tmp_path):
    from neonlite import Model
    from neonlite.callbacks import Callbacks
    from neonlite.data import ArrayIterator
    from neonlite.layers import Affine, GeneralizedCost
    from neonlite.optimizers import Adam
    from neonlite.transforms import CrossEntropyMulti, Rectlin, Softmax
    previous = neonlite.backends._current
    try:
        be = host_gpu_backend(monkeypatch)
        rng = np.random.default_rng(0)
        data = ArrayIterator(rng.random((24, 6)).astype(np.float32), rng.integers(0, 3, 24),
                             nclass=3, shuffle=False)
        model = Model([Affine(8, activation=Rectlin()), Affine(3, activation=Softmax())])
        with neonlite.profile(str(tmp_path / "g.json"), steps=(1, 4)) as prof:
            model.fit(data, Adam(1e-3), 2, GeneralizedCost(CrossEntropyMulti()),
                      Callbacks(model, progress=False))
        report = prof.rows()
    finally:
        neonlite.backends._current = previous
    assert report["clock"] == "cuda-events" and report["steps_profiled"] == 3
    assert [r["name"] for r in report["layers"] if r["depth"] == 0] == ["Affine_0", "Affine_1"]
    assert report["peak_gflops"] is None
    gemms = [s for s in prof.recorder.spans if s.name == "compound_dot"]
    assert gemms and all(s.args["variant"] == "cublas" and s.end >= s.begin for s in gemms)
    assert all(s.flops > 0 for s in gemms)
