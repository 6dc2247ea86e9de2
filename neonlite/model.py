"""Model: a stack of layers trained with a cost and an optimizer."""
import threading
import warnings
from collections import OrderedDict

import numpy as np

from . import model_files
from .array_fit import array_datasets
from .backends import get_backend
from .callbacks import Callbacks
from .data import ArrayIterator
from .data.position import epoch_batches
from .finite import first_nonfinite
from .generation import generate
from .interrupts import TrainingInterrupted
from .layer_names import check_layer_names, check_tensor_names
from .layers.containers import Sequential
from .layers.shared import share_padding_masks, tie_layers
from .memory_check import check_network_fits
from .model_bytes import model_state, rebuild
from .model_checks import (check_backend, check_data_shape, check_optimizer,
                           check_pad_targets, check_targets, claim_layers, param_value)
from .model_table import describe_table
from .optimizers.schedules import plan_schedules_for
from .token_masks import (given_mask, ids_and_mask_iterator, is_ids_and_mask,
                          padding_embeddings)
from .transforms.activation import Logistic, Softmax
from .transforms.metric import MetricError, Misclassification


class Model:
    """A network of layers (a list, nested lists allowed, or a container layer).

    Unnamed layers are named ``<type>_<index>`` (index: position in the list; layers inside a
    container get the container's name as a prefix).  Parameters are named
    ``"<layer name>.<param>"``.  ``inference_lock`` (reentrant) is held by ``predict``,
    ``get_outputs``, ``eval`` and ``generate``: the layers write one set of output buffers, so
    threads sharing a model take turns, each call returning what it returns alone.  Training
    takes no lock; ``fprop`` returns a layer's own buffer (hold the lock until it is read).
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
        self.classes = None
        self.grad_sync = None
        self._stepped = []
        self._finite_work = {}
        self._full_finite_check = True
        self.arena = None
        self.inference_lock = threading.RLock()
        claim_layers(self, self.layers)

    # ---- set-up ------------------------------------------------------------------------------
    def initialize(self, dataset, cost=None, optimizer=None):
        """Configure (checking every shape) and allocate the layers for ``dataset``'s example
        shape; attach ``cost``.  Before allocating, what the network will hold (parameters,
        gradients, ``optimizer``'s state when given, activations, workspaces) is compared
        with the memory available (:mod:`neonlite.memory_check`).  Nothing is changed if a
        check fails."""
        in_shape = tuple(dataset.shape)
        if self.in_shape is not None:
            check_backend(self)
            out_shape = check_data_shape(self, dataset, in_shape)
            if cost is not None:
                check_targets(dataset, out_shape)
                if cost is not self.cost:
                    self._attach_cost(cost, dataset)
            return
        be = get_backend()
        out_shape = self.layers.configure(in_shape)
        if cost is not None:
            check_targets(dataset, out_shape)
        check_network_fits(self.layers.leaves(), be, optimizer)
        self.be = be
        self.out_shape = out_shape
        self.layers.set_needs_deltas(False)
        self.layers.allocate()
        share_padding_masks(self.layers.leaves())
        check_tensor_names(self.layers.leaves())

        self.arena = be.make_arena(self.parameters())
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
        self._require_initialized("fprop")
        return self.layers.fprop(x, inference)

    def bprop(self, delta):
        self._require_initialized("bprop")
        return self.layers.bprop(delta)

    def zero_grads(self):
        """Every gradient = 0 (one fill per dtype where the parameters live in an arena, else one
        per gradient)."""
        if self.arena is not None:
            self.arena.zero_grads()
            return
        for p in self.parameters():
            p.grad.fill(0.0)

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

    def fit(self, dataset, optimizer, num_epochs, cost, callbacks=None, progress=True, *,
            y=None, validation_split=None, nclass=None):
        """Train for epochs ``self.epoch_index .. num_epochs - 1``: ``num_epochs`` is the total,
        as in neon, so a resumed model goes on where it stopped, and a second
        ``fit(..., num_epochs=1)`` has nothing to do (it warns, naming the ``num_epochs`` that
        trains one more epoch).  Without ``callbacks`` it shows the progress ``neonlite train``
        shows (``progress=False``: nothing).

        Keras-style, ``dataset`` may be an array X (N, ...) with ``y=`` its labels (N,) or
        targets, and ``validation_split=`` the fraction, from the end, evaluated after every
        epoch instead of trained on (:mod:`neonlite.array_fit`; ``nclass`` defaults to the
        output's width for whole-number labels)."""
        valid = None
        if y is not None or validation_split is not None:
            if validation_split is not None and callbacks is not None:
                raise ValueError("Model.fit: validation_split= makes its own evaluation; with "
                                 "your own callbacks, pass Callbacks(model, eval_set=valid)")
            dataset, valid = array_datasets(self, dataset, y, validation_split, nclass)
        self.initialize(dataset, cost, optimizer)
        check_pad_targets(dataset, cost)
        check_optimizer(optimizer, self)
        if self.epoch_index >= num_epochs:
            warnings.warn(f"Model.fit: nothing to train: epoch_index is {self.epoch_index} and "
                          f"num_epochs={num_epochs} is the total number of epochs, not a count "
                          f"of more; pass num_epochs={self.epoch_index + 1} to train one more "
                          f"epoch", UserWarning, stacklevel=2)
        if self.grad_sync is not None:
            self.grad_sync.start(self)
        callbacks = callbacks if callbacks is not None else \
            Callbacks(self, eval_set=valid, progress=progress)
        callbacks.model = self
        self.optimizer = optimizer
        plan_schedules_for(optimizer, dataset, num_epochs)
        getattr(self.be, "prepare_kernels", lambda: None)()
        callbacks.on_train_begin(dataset, num_epochs)
        stop = getattr(callbacks, "stop_signal", None)
        self._full_finite_check = True
        for epoch in range(self.epoch_index, num_epochs):
            skip, self.batch_index = self.batch_index, 0
            self.epoch_rng_state = self.be.rng.bit_generator.state
            callbacks.on_epoch_begin(epoch)
            for batch, (x, t) in epoch_batches(dataset, skip):
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
        finite; without a model arena (16-bit parameters under ``MixedPrecision``, whose
        masters and states have an arena of their own) the optimizer's word covers them all.
        Never on a run's first step (``fit`` checks everything once, so arena states the
        update does not write, e.g. loaded ones, are covered too)."""
        verify = getattr(self.optimizer, "updated_finite", None)
        if self._full_finite_check or verify is None:
            return False
        params = self.parameters()
        if not verify(params):
            return False
        return self.arena is None or first_nonfinite(self.arena.states_outside(params),
                                                     self._finite_work) is None

    def first_nonfinite(self):
        """The name of the first parameter (``"<layer>.<param>"``) or optimizer state
        (``"<layer>.<param>/<key>"``) holding a NaN or inf, else None.  Called after every
        training step: one pass over each buffer of the backend's arena, then (only when one
        of them holds a NaN or inf, to name it) two allocation-free reductions per tensor
        (:mod:`neonlite.finite`)."""
        arena = self.arena
        if arena is not None and arena.all_finite(states=True) and \
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
        or logistic output).  In data-parallel training (``grad_sync``) the sum and count are
        added over the ranks, so each rank evaluates its shard and all get the same value;
        every rank must call it.  Threads take turns (``inference_lock``)."""
        with self.inference_lock:
            return self._eval(dataset, metric)

    def _eval(self, dataset, metric):
        self.initialize(dataset)
        metric = metric if metric is not None else self._default_metric()
        metric.check(self.out_shape)
        total, count = 0.0, 0
        for x, t in self._batches(dataset):
            y = self.layers.fprop(x, inference=True)
            n = getattr(dataset, "valid", x.shape[0])
            y_host, t_host = _rows(y.get()[:n]), _rows(t.get()[:n])
            y_host, t_host = _not_ignored(y_host, t_host, getattr(self.cost, "ignore_index",
                                                                  None))
            values = metric(y_host, t_host)
            total += float(np.sum(values))
            count += len(values)
        if self.grad_sync is not None:
            total, count = self.grad_sync.sum_over_ranks([total, count])
        if count == 0:
            raise MetricError(f"Model.eval: every target of the data set "
                             f"'{getattr(dataset, 'name', 'data')}' equals the cost's "
                             f"ignore_index; there is nothing to score")
        aggregate = getattr(metric, "aggregate", None)
        return aggregate(total / count) if aggregate else total / count

    def _default_metric(self):
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
        in batches of the backend's size), a tokenizer's ``(ids, mask)`` pair (see
        :meth:`get_outputs`) or a data set; (N,) + output shape, in order."""
        if not is_ids_and_mask(data) and isinstance(data, (np.ndarray, list, tuple)):
            data = ArrayIterator(np.asarray(data), shuffle=False, name="predict input")
        return self.get_outputs(data)

    def generate(self, prompt, n, temperature=1.0, top_k=None, seed=None, vocab=None,
                 use_cache=True):
        """``n`` characters sampled after ``prompt`` by a character language model, with a
        key/value cache (see :func:`neonlite.generation.generate`; the vocabulary defaults to
        the one recorded in the model's Embedding).  Under ``inference_lock``."""
        with self.inference_lock:
            return generate(self, vocab, prompt, n, temperature, top_k, seed, use_cache)

    def get_outputs(self, dataset):
        """Outputs for every example of ``dataset`` in order, (ndata,) + output shape.

        ``dataset`` may be a tuple ``(ids, mask)`` of two (N, T) arrays, as
        :meth:`neonlite.text.Tokenizer.encode_batch` returns them: the mask (1 at real tokens,
        0 at pads) is then the padding mask of every Embedding with a ``pad_id``, in place of
        the one read from the ids (:mod:`neonlite.token_masks`).  Under ``inference_lock``."""
        with self.inference_lock:
            return self._get_outputs(dataset)

    def _get_outputs(self, dataset):
        masked = is_ids_and_mask(dataset)
        if masked:
            dataset = ids_and_mask_iterator(*dataset)
        self.initialize(dataset)
        embeddings = padding_embeddings(self, dataset.y) if masked else []
        outs = []
        for x, t in self._batches(dataset):
            with given_mask(embeddings, t if masked else None):
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
        right shape, and nothing is changed unless all are.  Float parameters take float16/32/64
        values (converted to their dtype, which must hold them); integer buffers integers; any
        other dtype is refused (``model_checks.param_value``), never converted silently."""
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
        values = {key: param_value(key, params[key], tensor) for key, tensor in named.items()}
        for key, tensor in named.items():
            tensor.set(values[key])

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
        return model_files.from_description(cls, desc)

    def export_onnx(self, path, opset=17, fold_bn=False):
        """Write this (initialized) model to ``path`` as ONNX at ``opset`` (see
        :mod:`neonlite.interop.onnx`: NHWC input, dynamic batch axis); ``fold_bn``: each
        BatchNorm right after a convolution or linear layer is folded into its weights.
        Returns the path."""
        from .interop.onnx.export import export_onnx
        return export_onnx(self, path, opset, fold_bn)

    def save(self, path, optimizer=None, config=None):
        """Write a checkpoint (see :mod:`neonlite.serialize`): description, parameters,
        optimizer state (``optimizer`` or the one :meth:`fit` used), epoch/step, RNG state."""
        return model_files.save(self, path, optimizer, config)

    def __reduce__(self):
        """Pickling (and ``copy.deepcopy``) goes through the checkpoint format
        (:mod:`neonlite.model_bytes`): a pickled model is its checkpoint's bytes."""
        return _rebuild_model, model_state(self)

    @classmethod
    def from_checkpoint(cls, ckpt):
        """A model rebuilt from a read checkpoint's description (``serialize.Checkpoint``),
        initialized for its input shape on the current backend, with the checkpoint's
        parameters loaded (a warning where they hold NaN or inf)."""
        return model_files.from_checkpoint(cls, ckpt)

    @classmethod
    def load(cls, path):
        """The model stored in checkpoint ``path``, rebuilt on the current backend with its
        parameters loaded (``epoch_index``/``step_index`` as saved; ``metric`` as the run
        configured it).  Before any ``gen_backend`` it makes the backend the checkpoint names
        (backend, batch size, data type), or says what to call when that one cannot run."""
        return model_files.load(cls, path)

    @classmethod
    def from_onnx(cls, path, name=None):
        """The model of the standard ONNX CNN in ``path`` (``neonlite.onnx_import``): NHWC
        input, the file's weights, initialized on the current backend (CPU, batch 1 if none)."""
        from .onnx_import import import_onnx
        return import_onnx(cls, path, name)

    def describe(self):
        """A table: layer, type, output shape, parameter count; and the total."""
        if self.in_shape is None:
            raise RuntimeError("describe: initialize the model with a data set first")
        return describe_table(self.layers.layers, self.parameters(), self.layers.max_steps)


def _rebuild_model(kind, data, name):
    """The model a pickle holds (see :meth:`Model.__reduce__`)."""
    return rebuild(Model, kind, data, name)


def _rows(a):
    return a.reshape(-1, a.shape[-1]) if a.ndim > 2 else a


def _not_ignored(y, t, ignore_index):
    """The rows of outputs y whose class-index target in t (one per row, of any numeric
    dtype) is not ``ignore_index`` (the cost's; pads), with those targets: the metrics leave
    the others out."""
    if ignore_index is None or y.ndim < 2 or t.size * y.shape[-1] != y.size or \
            t.shape == y.shape:
        return y, t
    t = t.reshape(-1)
    y = y.reshape(t.size, -1)
    keep = t != ignore_index
    return y[keep], t[keep]
