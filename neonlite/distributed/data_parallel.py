"""DataParallel: the same model on every rank, gradients averaged by bucketed allreduce that
overlaps the backward pass.

Use (the CLI does all of this under mpirun)::

    world = detect_world()
    gen_backend("cpu", batch_size=world.split_batch(128), rng_seed=0,
                device_id=world.local_rank)
    train = shard(dataset.train_iter, world)
    model = Model(layers)
    DataParallel(world, sync_bn=True).attach(model)
    model.fit(train, optimizer, num_epochs, cost, callbacks)

``attach`` sets ``model.grad_sync``; ``Model.fit`` then calls :meth:`start` (after the model is
initialized: every parameter, buffer and the host RNG state are broadcast from rank 0, the
buckets are planned and each parameter layer's ``bprop`` is watched) and ``Model.train_step``
calls :meth:`finish` after bprop (waits for every bucket, divides by the number of ranks)
before the optimizer step.  A bucket's allreduce starts as soon as the last layer feeding it
has run bprop; buckets start in index order on every rank, which MPI requires.

Before the broadcast, :meth:`start` compares the model's layout over the ranks (every
parameter's and buffer's name, shape and type, the batch size, ``sync_bn``:
:func:`~neonlite.distributed.run_check.layout_items`), so ranks that built different models
stop with one :class:`~neonlite.distributed.world.DistributedError` naming what differs
instead of exchanging buffers of different sizes.  Also set at :meth:`start`: batch norm layers get a statistics hook when ``sync_bn`` (sums
over every rank's examples; the default keeps per-rank statistics), and layers with an
``example_offset`` (Dropout) learn the global index of this rank's first example.
"""
import time

import numpy as np

from . import cores
from .buckets import DEFAULT_BUCKET_BYTES, HostTransport, plan_buckets
from .collective import Collectives
from .progress import progress_thread_for
from .run_check import check_same_run, layout_items
from .sync_bn import StatisticsSync
from .nccl import nccl_available, NcclTransport


class DataParallel:
    """Data-parallel training of one model over ``world`` (see the module docstring).

    Arguments:
        world: a :class:`~neonlite.distributed.world.World`.
        bucket_bytes (int): gradient bytes per allreduce message (about; 1 MiB default).
        sync_bn (bool): batch norm statistics over the global batch instead of per rank.
        timeout (float or None): seconds a collective may take before the job is aborted.
        progress_thread (bool or None): drive MPI's progress from a background thread while
            buckets are in flight (:mod:`.progress`; where MPI allows threads), so host-staged
            allreduces advance during long layer bprops; False tests them only between layers.
            None (default): a thread where this rank has at least two cores, so the poller does
            not take turns with the compute on one core.
        share_cores (bool): where the launcher left this machine's ranks on the same cores,
            pin each to its own share and size its thread pools to it (:mod:`.cores`;
            ``cores`` and ``threads`` say what was set, None: unchanged).  Collective: the
            constructor then runs on every rank.

    ``stats`` counts ``steps``, ``bytes`` (allreduced per step), ``wait_s`` (time spent in
    :meth:`finish` waiting for the allreduces: the communication not hidden behind bprop,
    and any lag of a slower rank), ``finish_s`` (all of :meth:`finish`: the wait, starting the
    last buckets and writing the averages back) and ``comm_started_early`` (buckets started
    during bprop).
    """

    def __init__(self, world, bucket_bytes=DEFAULT_BUCKET_BYTES, sync_bn=False, timeout=None,
                 progress_thread=None, share_cores=True):
        self.world, self.bucket_bytes, self.sync_bn = world, bucket_bytes, bool(sync_bn)
        self.cores, self.threads = (cores.share_cores(world) if share_cores and world.size > 1
                                    else (None, None))
        if progress_thread is None:
            progress_thread = cores.usable_cores() >= 2
        self.timeout, self.progress_thread = timeout, bool(progress_thread)
        self.model = None
        self.buckets = []
        self.stats = {"steps": 0, "bytes": 0, "wait_s": 0.0, "finish_s": 0.0,
                      "comm_started_early": 0}
        self._collectives = None
        self._watched = []

    @property
    def active(self):
        return self.world.size > 1

    def attach(self, model):
        """Make ``model`` train data-parallel (``model.grad_sync = self``); returns the model."""
        model.grad_sync = self
        self.model = model
        return model

    @property
    def collectives(self):
        if self._collectives is None:
            self._collectives = Collectives(self.world, self.timeout)
        return self._collectives

    # ---- start of training ---------------------------------------------------------------------
    def start(self, model):
        """Called by ``Model.fit`` once the model is initialized (see the module docstring)."""
        be = model.be
        offset = self.world.rank * be.bsz
        for leaf in model.layers.leaves():
            if hasattr(leaf, "example_offset"):
                leaf.example_offset = offset
        if not self.active:
            return
        if self.threads is not None:
            be.set_threads(self.threads)
        check_same_run(self.world, layout_items(model, self.sync_bn), exit=False)
        self.world.startup_stage("broadcast")
        self.broadcast_state(model)
        self.world.startup_done()
        for leaf in model.layers.leaves():
            if hasattr(leaf, "stat_sync"):
                leaf.stat_sync = StatisticsSync(self.collectives) if self.sync_bn else None
        if self.model is model and self.buckets:
            return
        self.model = model
        self.transport = self._transport(be)
        params = list(reversed(model.parameters()))
        self.buckets = [self.transport.make_bucket(i, group) for i, group in
                        enumerate(plan_buckets(params, self.bucket_bytes))]
        self._by_layer = {}
        for bucket in self.buckets:
            for key in bucket.owners:
                self._by_layer.setdefault(key, []).append(bucket)
        self._watch({id(p.layer): p.layer for p in params}.values())
        self._next = 0
        self._step = model.step_index

    def sum_over_ranks(self, values):
        """The element-wise sum of a few numbers over the ranks (float64 array; collective)."""
        buf = np.array(values, dtype=np.float64)
        if not self.active:
            return buf
        return self.collectives.allreduce(buf, "allreduce of evaluation sums")

    def _transport(self, be):
        if getattr(be, "name", None) == "gpu":
            if nccl_available():
                return NcclTransport(self.world, self.collectives, be)
        progress = (progress_thread_for(self.collectives.MPI) if self.progress_thread
                    else None)
        return HostTransport(self.collectives, self.world.size, progress,
                             in_place=getattr(be, "name", None) == "cpu")

    def broadcast_state(self, model):
        """Rank 0's parameters, buffers and host RNG state on every rank."""
        for name, tensor in model.named_tensors().items():
            host = np.ascontiguousarray(tensor.get())
            staged = host if host.dtype != np.float16 else host.astype(np.float32)
            self.collectives.broadcast(staged, f"broadcast of '{name}' from rank 0")
            tensor.set(staged)
        rng = model.be.rng.bit_generator
        rng.state = self.world.bcast(rng.state)

    def _watch(self, layers):
        for layer in layers:
            inner = layer.bprop

            def bprop(error, _inner=inner, _layer=layer):
                out = _inner(error)
                self._layer_done(_layer)
                return out
            layer.bprop = bprop
            self._watched.append(layer)

    def detach(self):
        """Undo :meth:`attach`: the model trains alone again."""
        for layer in self._watched:
            del layer.bprop
        self._watched, self.buckets = [], []
        if self.model is not None and self.model.grad_sync is self:
            self.model.grad_sync = None

    # ---- during bprop --------------------------------------------------------------------------
    def _layer_done(self, layer):
        for bucket in self._by_layer.get(id(layer), ()):
            bucket.pending.discard(id(layer))
        be = self.model.be
        while self._next < len(self.buckets) and not self.buckets[self._next].pending:
            self.transport.start(self.buckets[self._next], be)
            self._next += 1
            self.stats["comm_started_early"] += 1
        self.transport.poke(self.buckets[:self._next])

    def finish(self):
        """Complete every bucket's allreduce (starting any not started yet, in order) and leave
        each gradient averaged over the ranks.  Called before the optimizer step."""
        if not self.buckets:
            return
        begin = time.perf_counter()
        be = self.model.be
        while self._next < len(self.buckets):
            self.transport.start(self.buckets[self._next], be)
            self._next += 1
        self.stats["wait_s"] += self.transport.finish(self.buckets, self.model.step_index)
        self.stats["finish_s"] += time.perf_counter() - begin
        self.stats["steps"] += 1
        self.stats["bytes"] += sum(b.nbytes for b in self.buckets)
        for bucket in self.buckets:
            bucket.reset()
        self._next = 0
