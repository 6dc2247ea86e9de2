"""Model: a stack of layers trained with a cost and an optimizer."""
import warnings
from collections import OrderedDict

import numpy as np

from .backends import get_backend
from .layers.containers import CompoundLayer, MergeSum, Sequential
from .layer_names import check_layer_names, check_tensor_names
from .layers.layer import ShapeError
from .layers.shared import share_padding_masks, tie_layers
from .memory_check import check_outputs_fit
from .finite import first_nonfinite as first_nonfinite_of
from .optimizers.arena import ParameterArena, build_arena


class Model:
    """A network of layers (a list, nested lists allowed, or a container layer).

    Unnamed layers are named ``<type>_<index>`` (index: position in the list; layers inside a
    container get the container's name as a prefix).  Parameters are named
    ``"<layer name>.<param>"``.
    """

    def __init__(self, layers, name="model"):
        self.layers = layers if isinstance(layers, Sequential) else Sequential(
            layers if isinstance(layers, (list, tuple)) else [layers])
        self.layers.name_children()
        check_layer_names(self.layers.leaves())
        tie_layers(self.layers.leaves())
        self.name = name
        self.in_shape = None
        self.cost = None
        self.be = None
        self.epoch_index = 0
        self.step_index = 0
        self.batch_index = 0
        self.epoch_rng_state = None
        self.optimizer = None
        self.metric = None
        self.grad_sync = None
        self._stepped = []
        self._finite_work = {}
        self._full_finite_check = True

        self.arena = None

    # ---- set-up ------------------------------------------------------------------------------
    def initialize(self, dataset, cost=None):
        """Configure (checking every shape) and allocate the layers for ``dataset``'s example
        shape; attach ``cost``.  Nothing is changed if a check fails."""
        in_shape = tuple(dataset.shape)
        if self.in_shape is not None:
            if in_shape != self.in_shape:
                raise ShapeError(f"model '{self.name}' was built for inputs of shape "
                                 f"{self.in_shape} per example, but the data set "
                                 f"'{getattr(dataset, 'name', 'data')}' has shape {in_shape}")
            if cost is not None:
                _check_targets(dataset, self.out_shape)
                if cost is not self.cost:
                    self._attach_cost(cost, dataset)
            return
        be = get_backend()
        out_shape = self.layers.configure(in_shape)
        if cost is not None:
            _check_targets(dataset, out_shape)
        check_outputs_fit(self.layers.leaves(), be)
        self.be = be
        self.out_shape = out_shape
        self.layers.set_needs_deltas(False)
        self.layers.allocate()
        share_padding_masks(self.layers.leaves())
        check_tensor_names(self.layers.leaves())

        self.arena = build_arena(be, self.parameters())
        for p in self.parameters():
            p.arena = self.arena
        self._stepped = [leaf for leaf in self.layers.leaves() if hasattr(leaf, "set_step")]
        self.in_shape = in_shape
        if cost is not None:
            self._attach_cost(cost, dataset)

    def _attach_cost(self, cost, dataset):
        cost.initialize(self.layers.leaves()[-1], self.out_shape, self.be)
        if getattr(dataset, "target_shape", None) is not None:
            cost.check_targets(dataset.target_shape)
        self.cost = cost

    def parameters(self):
        """Every learnable Parameter, in layer order."""
        return self.layers.parameters()

    # ---- training and inference ----------------------------------------------------------------
    def fprop(self, x, inference=False):
        return self.layers.fprop(x, inference)

    def bprop(self, delta):
        return self.layers.bprop(delta)

    def zero_grads(self):
        """Every gradient = 0 (one fill per dtype where the parameters live in an arena)."""
        if self.arena is not None:
            self.arena.zero_grads()
            return
        for p in self.parameters():
            p.grad[:] = 0.0

    def train_step(self, x, t, optimizer, epoch):
        """One step: zero gradients, fprop, cost, bprop, update.  Returns the cost (float).

        With ``grad_sync`` set (data-parallel training, :mod:`neonlite.distributed`), the
        gradients are averaged over the processes between bprop and the update."""
        self.zero_grads()
        for leaf in self._stepped:
            leaf.set_step(self.step_index)
        y = self.layers.fprop(x)
        cost, delta = self.cost.cost_and_errors(y, t)
        self.layers.bprop(delta)
        if self.grad_sync is not None:
            self.grad_sync.finish()
        optimizer.optimize(self.parameters(), epoch)
        self.step_index += 1
        return cost

    def fit(self, dataset, optimizer, num_epochs, cost, callbacks=None, progress=True):
        """Train for epochs ``self.epoch_index .. num_epochs - 1``: ``num_epochs`` is the total,
        as in neon, so a resumed model goes on where it stopped, and a second
        ``fit(..., num_epochs=1)`` has nothing to do (it warns, naming the ``num_epochs`` that
        trains one more epoch).  Without ``callbacks`` it shows the progress ``neonlite train``
        shows (``progress=False``: nothing)."""
        from .callbacks import Callbacks
        self.initialize(dataset, cost)
        if self.epoch_index >= num_epochs:
            warnings.warn(f"Model.fit: nothing to train: epoch_index is {self.epoch_index} and "
                          f"num_epochs={num_epochs} is the total number of epochs, not a count "
                          f"of more; pass num_epochs={self.epoch_index + 1} to train one more "
                          f"epoch", UserWarning, stacklevel=2)
        if self.grad_sync is not None:
            self.grad_sync.start(self)
        callbacks = callbacks if callbacks is not None else Callbacks(self, progress=progress)
        callbacks.model = self
        self.optimizer = optimizer
        getattr(self.be, "prepare_kernels", lambda: None)()
        callbacks.on_train_begin(dataset, num_epochs)
        stop = getattr(callbacks, "stop_signal", None)
        self._full_finite_check = True
        for epoch in range(self.epoch_index, num_epochs):
            skip, self.batch_index = self.batch_index, 0
            self.epoch_rng_state = self.be.rng.bit_generator.state
            callbacks.on_epoch_begin(epoch)
            for batch, (x, t) in enumerate(dataset):
                if batch < skip:
                    continue
                value = self.train_step(x, t, optimizer, epoch)
                self._check_finite(value, epoch, batch)
                callbacks.on_minibatch_end(epoch, batch, value)
                if stop is not None and stop.signum is not None:
                    self._interrupted(callbacks, stop.signum, epoch, batch + 1)
            self.epoch_index = epoch + 1
            callbacks.on_epoch_end(epoch)
            if callbacks.stop_training:
                break
        callbacks.on_train_end()

    def _interrupted(self, callbacks, signum, epoch, batches):
        """Stop inside epoch ``epoch`` after ``batches`` of its batches: callbacks'
        ``on_train_interrupted`` (a resumable checkpoint: the host RNG state at the start of
        the epoch replays its data order, the batches done are skipped), then raise."""
        from .interrupts import TrainingInterrupted
        self.batch_index = batches
        callbacks.interrupted_checkpoint = None
        callbacks.on_train_interrupted(epoch, batches)
        raise TrainingInterrupted(signum, epoch, batches, callbacks.interrupted_checkpoint)

    def _check_finite(self, cost, epoch, batch):
        """FloatingPointError when the step just taken made the cost, a parameter or an
        optimizer state non-finite; epoch and batch are counted from 1, as the progress line
        counts them."""
        where = f"at epoch {epoch + 1}, batch {batch + 1}"
        if not np.isfinite(cost):
            raise FloatingPointError(f"the cost became {cost} {where}: lower the learning rate "
                                     f"or check the data; nothing was saved from this step")
        if self._update_found_finite():
            return
        self._full_finite_check = False
        bad = self.first_nonfinite()
        if bad is not None:
            raise FloatingPointError(f"{bad} became NaN or inf in the update {where}: lower the "
                                     f"learning rate (or clip gradients); nothing was saved "
                                     f"from this step")

    def _update_found_finite(self):
        """True when this step's update needs no finiteness pass of its own: the optimizer's
        fused pass over the arena wrote every parameter and saw every value it wrote (weights
        and states) finite (``updated_finite``), and the model's other optimizer states are
        finite.  Never on a run's first step (``fit`` checks everything once, so arena states
        the update does not write, e.g. loaded ones, are covered too)."""
        verify = getattr(self.optimizer, "updated_finite", None)
        if self._full_finite_check or verify is None or \
                not isinstance(self.arena, ParameterArena):
            return False
        params = self.parameters()
        return verify(params) and first_nonfinite_of(self.arena.states_outside(params),
                                                     self._finite_work) is None

    def first_nonfinite(self):
        """The name of the first parameter (``"<layer>.<param>"``) or optimizer state
        (``"<layer>.<param>/<key>"``) holding a NaN or inf, else None.  Called after every
        training step: on the CPU one pass over each arena buffer, then (only when one of them
        holds a NaN or inf, to name it) two allocation-free reductions per tensor
        (:mod:`neonlite.finite`)."""
        from .finite import first_nonfinite
        arena = self.arena
        if isinstance(arena, ParameterArena) and arena.all_finite(states=True) and \
                first_nonfinite(arena.states_outside(self.parameters()), self._finite_work) is None:
            return None
        return first_nonfinite(self._watched_tensors(), self._finite_work)

    def _watched_tensors(self):
        for p in self.parameters():
            yield p.name, p.value
            for key, state in p.states.items():
                yield f"{p.name}/{key}", state

    def _batches(self, dataset):
        batches = getattr(dataset, "batches", None)
        return batches(shuffle=False) if batches else iter(dataset)

    def eval(self, dataset, metric=None):
        """Mean of ``metric`` over every real example of ``dataset`` (inference mode); a
        metric with ``aggregate(mean)`` (perplexity) turns the mean into its value.  Without
        ``metric``: the model's ``metric`` (the run's, set by ``neonlite train``, the
        Evaluation callback or a checkpoint), else misclassification for a classifier (softmax
        or logistic output).  In
        data-parallel training (``grad_sync``) the sum and count are added over the ranks, so
        each rank evaluates its shard and all get the same value (an unsharded set counted on
        every rank gives the same mean too).  Collective then: every rank must call it."""
        self.initialize(dataset)
        metric = metric if metric is not None else self._default_metric()
        total, count = 0.0, 0
        for x, t in self._batches(dataset):
            y = self.layers.fprop(x, inference=True)
            n = getattr(dataset, "valid", x.shape[0])
            y_host, t_host = _rows(y.get()[:n]), _rows(t.get()[:n])
            values = metric(y_host, t_host)
            total += float(np.sum(values))
            count += len(values)
        if self.grad_sync is not None:
            total, count = self.grad_sync.sum_over_ranks([total, count])
        aggregate = getattr(metric, "aggregate", None)
        return aggregate(total / count) if aggregate else total / count

    def _default_metric(self):
        from .transforms.activation import Logistic, Softmax
        from .transforms.metric import Misclassification
        if self.metric is not None:
            return self.metric
        last = self.layers.leaves()[-1]
        if isinstance(getattr(last, "transform", None), (Softmax, Logistic)):
            return Misclassification()
        raise ValueError("Model.eval: no metric given, none configured (model.metric) and the "
                         "model is not a classifier; call model.eval(dataset, metric), e.g. "
                         "with neonlite.transforms.LogLoss()")

    def predict(self, data):
        """Outputs for every example of ``data``: a batch-first array (N, ...) of inputs (run
        in batches of the backend's size) or a data set; (N,) + output shape, in order."""
        if isinstance(data, np.ndarray) or isinstance(data, (list, tuple)):
            from .data import ArrayIterator
            data = ArrayIterator(np.asarray(data), shuffle=False, name="predict input")
        return self.get_outputs(data)

    def generate(self, prompt, n, temperature=1.0, top_k=None, seed=None, vocab=None,
                 use_cache=True):
        """``n`` characters sampled after ``prompt`` by a character language model, with a
        key/value cache (see :func:`neonlite.generation.generate`; the vocabulary defaults to
        the one recorded in the model's Embedding)."""
        from .generation import generate
        return generate(self, vocab, prompt, n, temperature, top_k, seed, use_cache)

    def get_outputs(self, dataset):
        """Outputs for every example of ``dataset`` in order, (ndata,) + output shape."""
        self.initialize(dataset)
        outs = []
        for x, _ in self._batches(dataset):
            y = self.layers.fprop(x, inference=True)
            outs.append(y.get()[:getattr(dataset, "valid", x.shape[0])])
        return np.concatenate(outs)

    # ---- parameters ------------------------------------------------------------------------------
    def _require_initialized(self, what):
        if self.in_shape is None:
            raise RuntimeError(f"{what}: the model has no parameters yet; call "
                               f"model.initialize(dataset) (or fit) first")

    def named_tensors(self):
        """Ordered ``name -> tensor`` of every parameter and buffer (running statistics)."""
        self._require_initialized("named_tensors")
        named = OrderedDict()
        for leaf in self.layers.leaves():
            for p in leaf.parameters():
                named[p.name] = p.value
            for key, buf in leaf.buffers().items():
                named[f"{leaf.name}.{key}"] = buf
        return named

    def get_params(self):
        """Ordered dict ``"<layer name>.<param>" -> ndarray`` (parameters and buffers)."""
        return OrderedDict((k, t.get()) for k, t in self.named_tensors().items())

    def set_params(self, params):
        """Load ``name -> array`` from :meth:`get_params`; every key must be present with the
        right shape, and nothing is changed unless all are."""
        named = self.named_tensors()
        missing = [k for k in named if k not in params]
        if missing:
            raise KeyError(f"set_params: missing parameter '{missing[0]}' (expected shape "
                           f"{named[missing[0]].shape})" + (f" and {len(missing) - 1} more"
                                                           if len(missing) > 1 else ""))
        extra = [k for k in params if k not in named]
        if extra:
            raise KeyError(f"set_params: unexpected parameter '{extra[0]}'; the model has "
                           f"{list(named)}")
        for key, tensor in named.items():
            shape = np.shape(params[key])
            if tuple(shape) != tuple(tensor.shape):
                raise ValueError(f"set_params: parameter '{key}' has shape {tuple(shape)}, "
                                 f"expected {tuple(tensor.shape)}")
        for key, tensor in named.items():
            tensor.set(np.asarray(params[key]))

    # ---- description and files -------------------------------------------------------------------
    def get_description(self):
        """The network in the YAML schema: ``{"layers": [{type, config}, ...]}``, plus
        ``cost`` and ``optimizer`` once :meth:`fit` (or :meth:`initialize`) attached them."""
        top = self.layers
        layers = [top.get_description()] if top.name else \
            [layer.get_description() for layer in top.layers]
        desc = {"layers": layers}
        if self.cost is not None:
            desc["cost"] = self.cost.get_description()
        if self.optimizer is not None:
            desc["optimizer"] = self.optimizer.get_description()
        return desc

    @classmethod
    def from_description(cls, desc):
        """A new (uninitialized) model from a description's ``layers`` list (a run's whole
        description, as :meth:`get_description` or a YAML file gives, or just the list).
        Raises :class:`neonlite.config.ConfigError` with the key path of a bad entry."""
        from .config.build import build
        from .config.errors import ConfigError, short_repr
        layers = desc.get("layers") if isinstance(desc, dict) else desc
        if not isinstance(layers, list) or not layers:
            raise ConfigError("layers: expected a non-empty list of {type, config} layers, got "
                              f"{short_repr(layers)}")
        return cls([build(d, "layer", f"layers[{i}]") for i, d in enumerate(layers)])

    def export_onnx(self, path, opset=17):
        """Write this (initialized) model to ``path`` as ONNX at ``opset`` (see
        :mod:`neonlite.interop.onnx`: NHWC input, dynamic batch axis); returns the path."""
        from .interop.onnx.export import export_onnx
        return export_onnx(self, path, opset)

    def save(self, path, optimizer=None, config=None):
        """Write a checkpoint (see :mod:`neonlite.serialize`): description, parameters,
        optimizer state (``optimizer`` or the one :meth:`fit` used), epoch/step, RNG state."""
        from .serialize import save_checkpoint
        if config is None:
            config = {**self.get_description(), **self._backend_settings()}
        return save_checkpoint(path, self, optimizer, config)

    def _backend_settings(self):
        """``backend``, ``batchsize`` and ``datatype`` of the backend the model runs on (what
        :meth:`load` makes again when there is no backend yet)."""
        from .config.settings import DATATYPES
        names = {np.dtype(v).name: k for k, v in DATATYPES.items() if k != "bf16"}
        settings = {"backend": self.be.name, "batchsize": int(self.be.bsz)}
        dtype = getattr(self.be, "dtype", None)
        if dtype is not None and np.dtype(dtype).name in names:
            settings["datatype"] = names[np.dtype(dtype).name]
        return settings

    @classmethod
    def from_checkpoint(cls, ckpt):
        """A model rebuilt from a read checkpoint's description (``serialize.Checkpoint``),
        initialized for its input shape on the current backend, with the checkpoint's
        parameters loaded (a warning where they hold NaN or inf)."""
        from .config.errors import ConfigError
        from .serialize import CheckpointError, NonFiniteWarning, ShapeStub, load_params
        try:
            model = cls.from_description(ckpt.config)
            model.initialize(ShapeStub(ckpt.in_shape))
        except ConfigError as err:
            raise CheckpointError(f"{ckpt.path}: its network description does not build: "
                                  f"{err}") from None
        load_params(model, ckpt)
        bad = ckpt.first_nonfinite()
        if bad is not None:
            warnings.warn(f"{ckpt.path}: {bad} holds NaN or inf values, so what this model "
                          f"computes is meaningless (the training that wrote it diverged)",
                          NonFiniteWarning, stacklevel=2)
        return model

    @classmethod
    def load(cls, path):
        """The model stored in checkpoint ``path``, rebuilt on the current backend with its
        parameters loaded (``epoch_index``/``step_index`` as saved; ``metric`` as the run
        configured it).  Before any ``gen_backend`` it makes the backend the checkpoint names
        (backend, batch size, data type), or says what to call when that one cannot run."""
        from .serialize import read_checkpoint
        ckpt = read_checkpoint(path)
        _backend_for(ckpt)
        model = cls.from_checkpoint(ckpt)
        model.epoch_index, model.step_index = ckpt.epoch_index, ckpt.step_index
        if ckpt.config.get("metric") is not None:
            from .config.build import build
            from .config.errors import ConfigError
            try:
                model.metric = build(ckpt.config["metric"], "metric", "metric")
            except ConfigError:
                model.metric = None
        return model

    def describe(self):
        """A table: layer, type, output shape, parameter count; and the total."""
        if self.in_shape is None:
            raise RuntimeError("describe: initialize the model with a data set first")
        rows = []
        _describe_rows(self.layers.layers, 0, rows)
        width = max(len(r[0]) for r in rows) + 2
        kinds = max(14, max(len(r[1]) for r in rows) + 2)
        lines = [f"{'layer':<{width}}{'type':<{kinds}}{'output shape':<20}{'params':>12}"]
        lines.append("-" * len(lines[0]))
        for name, kind, shape, count in rows:
            lines.append(f"{name:<{width}}{kind:<{kinds}}{str(shape):<20}{count:>12,}")
        total = sum(p.value.size for p in self.parameters())
        lines.append("-" * len(lines[0]))
        lines.append(f"{'total':<{width + kinds + 20}}{total:>12,}")
        return "\n".join(lines)


def _backend_for(ckpt):
    """Make the backend checkpoint ``ckpt`` was trained on when there is none yet."""
    from .backends import BackendUnavailable, gen_backend
    try:
        get_backend()
        return
    except RuntimeError:
        pass
    from .config.settings import DATATYPES
    name = ckpt.config.get("backend", "cpu")
    batch = ckpt.config.get("batchsize", 128)
    datatype = ckpt.config.get("datatype", "f32")
    try:
        gen_backend(name, batch_size=batch, datatype=DATATYPES.get(datatype, np.float32))
    except (BackendUnavailable, ValueError, TypeError) as err:
        raise RuntimeError(f"Model.load({str(ckpt.path)!r}): no backend yet, and the "
                           f"checkpoint's ({name}, batch {batch}, {datatype}) cannot run here "
                           f"({err}); call neonlite.gen_backend('cpu', batch_size={batch}) "
                           f"first") from None


def _describe_rows(layers, depth, rows):
    for layer in layers:
        rows.append(("  " * depth + str(layer.name), type(layer).__name__,
                     layer.out_shape, layer.param_count()))
        if isinstance(layer, MergeSum):
            for branch in layer.branches:
                _describe_rows(branch.layers, depth + 1, rows)
        elif isinstance(layer, Sequential) and not isinstance(layer, CompoundLayer):
            _describe_rows(layer.layers, depth + 1, rows)


def _check_targets(dataset, out_shape):
    """The data set's targets fit outputs of ``out_shape``: the same shape, or class indices
    (out_shape[:-1]) of ``dataset.nclass`` (when it says) = out_shape[-1] classes."""
    target_shape = getattr(dataset, "target_shape", None)
    if target_shape is None:
        return
    target_shape, out_shape = tuple(target_shape), tuple(out_shape)
    nclass = getattr(dataset, "nclass", None)
    if out_shape and target_shape == out_shape[:-1] and nclass not in (None, out_shape[-1]):
        raise ShapeError(f"the data set's targets have shape {target_shape + (nclass,)} per "
                         f"example (class indices of {nclass} classes) but the model's output "
                         f"has shape {out_shape}")
    if target_shape != out_shape and not (out_shape and target_shape == out_shape[:-1]):
        raise ShapeError(f"the data set's targets have shape {target_shape} per example "
                         f"but the model's output has shape {out_shape}")


def _rows(a):
    return a.reshape(-1, a.shape[-1]) if a.ndim > 2 else a
