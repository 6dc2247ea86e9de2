"""The training log (``neonlite train -o LOG.h5``): per-batch cost and per-epoch validation
metric and times, in one HDF5 file that is readable at any moment of the run.

Layout (format version :data:`FORMAT_VERSION`)::

    /               attrs: format="neonlite-training-log", format_version, metric (name),
                    complete (False while the run goes on), interrupted (True when a signal
                    stopped it; absent in older logs), config (the run's YAML, if given)
    /batch/cost     (B,) float64: the cost of every batch, in order
    /batch/epoch    (B,) int64: the epoch (from 0) of each batch
    /batch/time     (B,) float64: seconds since the run started, at the end of each batch
    /epoch/index    (E,) int64: epoch numbers (from 0)
    /epoch/train_cost (E,) float64: mean batch cost of the epoch
    /epoch/metric   (E,) float64: the validation metric after the epoch (NaN: not evaluated)
    /epoch/seconds  (E,) float64: wall time of the epoch
    /epoch/time     (E,) float64: seconds since the run started, at the end of the epoch

The log is made at the start of the run under a temporary name (with the records a resumed
run keeps), switched to HDF5's single-writer / multiple-reader mode (SWMR: the file is
consistent on disk after every flush, so a reader, ``neonlite plot`` or ``h5py.File(path,
"r", swmr=True)``, finds a readable log at any moment, even after the writer was killed),
renamed into place (:func:`neonlite.atomic.publish`) and kept open: at the end of every
epoch, and at most every ``flush_interval`` seconds within one, only the new rows are APPENDED to the resizable
columns and the attributes updated, so a write costs the rows since the last one, not the
whole run (a log rewritten whole every epoch made long runs slow down quadratically).  A
resumed run (``--resume``) keeps the records of the epochs before the one it resumes at, and
of the batches of that epoch an interrupted run trained.

:func:`read_log` opens the file through :func:`neonlite.safe_hdf5.open_hdf5` (a regular file
reading nothing but itself, as an SWMR reader) and, before reading a column, checks that the
columns' declared sizes are what their stored bytes can hold (deflate allowed) and fit in
memory.
"""
import time
from pathlib import Path

import numpy as np

from .atomic import make_temporary, publish
from .callbacks import Callback
from .safe_hdf5 import check_declared_fit, open_hdf5

FORMAT = "neonlite-training-log"
FORMAT_VERSION = 1
_BATCH = {"cost": np.float64, "epoch": np.int64, "time": np.float64}
_EPOCH = {"index": np.int64, "train_cost": np.float64, "metric": np.float64,
          "seconds": np.float64, "time": np.float64}
#: rows per HDF5 chunk of the resizable columns
_CHUNK = 4096


class LogError(ValueError):
    """A file that is not a readable training log; the message names it and says why."""


class TrainingLog(Callback):
    """Callback writing the training log at ``path`` (see the module docstring); ``config``
    is the run's YAML text to store with it."""

    describable = False

    def __init__(self, path, flush_interval=10.0, config=None):
        self.path = Path(path)
        self.flush_interval = float(flush_interval)
        self.config = config
        self.batch = {k: [] for k in _BATCH}
        self.epoch = {k: [] for k in _EPOCH}
        self.metric_name = ""
        self.file = None

    def output_paths(self):
        return [("training log", self.path)]

    def on_train_begin(self, dataset, num_epochs):
        self.offset = 0.0
        self.resumed_costs = []
        resumed = self.model.epoch_index > 0 or getattr(self.model, "batch_index", 0) > 0
        if resumed and self.path.is_file():
            self._keep_earlier(read_log(self.path), self.model.epoch_index,
                               getattr(self.model, "batch_index", 0))
        self.start = time.perf_counter()
        self.last_write = self.start
        self._create()

    def _keep_earlier(self, log, epoch_index, batch_index=0):
        """Carry over the records of epochs before ``epoch_index`` from an earlier run, and
        of the first ``batch_index`` batches of epoch ``epoch_index``."""
        epochs = log["batch"]["epoch"]
        within = np.cumsum(epochs == epoch_index) - 1
        partial = (epochs == epoch_index) & (within < batch_index)
        keep_b = (epochs < epoch_index) | partial
        self.resumed_costs = [float(c) for c in log["batch"]["cost"][partial]]
        keep_e = log["epoch"]["index"] < epoch_index
        for k in _BATCH:
            self.batch[k] = list(log["batch"][k][keep_b])
        for k in _EPOCH:
            self.epoch[k] = list(log["epoch"][k][keep_e])
        self.metric_name = log["metric"]
        times = self.epoch["time"]
        self.offset = float(times[-1]) if times else 0.0

    def _now(self):
        return self.offset + time.perf_counter() - self.start

    def on_epoch_begin(self, epoch):
        self.epoch_start = time.perf_counter()
        self.epoch_costs, self.resumed_costs = self.resumed_costs, []

    def on_minibatch_end(self, epoch, batch, cost):
        self.batch["cost"].append(float(cost))
        self.batch["epoch"].append(epoch)
        self.batch["time"].append(self._now())
        self.epoch_costs.append(float(cost))
        if time.perf_counter() - self.last_write >= self.flush_interval:
            self._write(complete=False)

    def on_epoch_end(self, epoch):
        last = getattr(self.model, "last_eval", None)
        fresh = last is not None and last[2] == epoch
        if fresh:
            self.metric_name = last[0]
        self.epoch["index"].append(epoch)
        self.epoch["train_cost"].append(float(np.mean(self.epoch_costs))
                                        if self.epoch_costs else np.nan)
        self.epoch["metric"].append(float(last[1]) if fresh else np.nan)
        self.epoch["seconds"].append(time.perf_counter() - self.epoch_start)
        self.epoch["time"].append(self._now())
        self._write(complete=False)

    def on_train_end(self):
        self._write(complete=True)
        self._close()

    def on_train_interrupted(self, epoch, batches):
        self._write(complete=False, interrupted=True)
        self._close()

    def _create(self):
        """Make the log (the records so far) under a temporary name, switch it to SWMR
        mode, rename it into place and keep it open."""
        import h5py
        self._close()
        temp = make_temporary(self.path)
        try:
            f = h5py.File(temp, "w", libver="latest")
            try:
                f.attrs["format"] = FORMAT
                f.attrs["format_version"] = FORMAT_VERSION
                if self.config is not None:
                    f.attrs["config"] = self.config
                self._set_state(f, complete=False, interrupted=False)
                for group, columns, types in (("batch", self.batch, _BATCH),
                                              ("epoch", self.epoch, _EPOCH)):
                    g = f.create_group(group)
                    for key, dtype in types.items():
                        g.create_dataset(key, data=np.asarray(columns[key], dtype=dtype),
                                         maxshape=(None,), chunks=(_CHUNK,))
                f.swmr_mode = True
                f.flush()
                publish(temp, self.path)
            except BaseException:
                f.close()
                raise
        except BaseException:
            if Path(temp).exists():
                Path(temp).unlink()
            raise
        self.file = f

    def _set_state(self, f, complete, interrupted):
        f.attrs["metric"] = self.metric_name
        f.attrs["complete"] = bool(complete)
        f.attrs["interrupted"] = bool(interrupted)

    def _write(self, complete, interrupted=False):
        """Append the rows not yet in the file, update the attributes, flush."""
        f = self.file
        for group, columns, types in (("batch", self.batch, _BATCH),
                                      ("epoch", self.epoch, _EPOCH)):
            for key, dtype in types.items():
                column = f[group][key]
                done = column.shape[0]
                new = columns[key][done:]
                if new:
                    column.resize((done + len(new),))
                    column[done:] = np.asarray(new, dtype=dtype)
        self._set_state(f, complete, interrupted)
        f.flush()
        self.last_write = time.perf_counter()

    def _close(self):
        if self.file is not None:
            self.file.close()
            self.file = None


def read_log(path):
    """``{"batch": {column: array}, "epoch": {column: array}, "metric": name, "complete":
    bool, "config": text or None}`` from the log at ``path``; :class:`LogError` otherwise.
    Opened as an SWMR reader, so a log still being written, or left by a killed run (its
    "open for write" flag still set), reads as what was flushed."""
    path = Path(path)
    f = open_hdf5(path, LogError, "training log", swmr=True)
    with f:
        fmt = f.attrs.get("format")
        if (fmt.decode() if isinstance(fmt, bytes) else fmt) != FORMAT:
            raise LogError(f"{path}: not a neonlite training log (no '{FORMAT}' format mark; a "
                           f"checkpoint is not a log: make one with neonlite train -o LOG.h5)")
        version = int(f.attrs.get("format_version", -1))
        if version != FORMAT_VERSION:
            raise LogError(f"{path}: training log format version {version}; this neonlite "
                           f"reads version {FORMAT_VERSION}")
        check_declared_fit(f, path, LogError, "training log", compressed=True)
        try:
            _check_columns(path, f)
            log = {group: {k: f[group][k][()] for k in cols}
                   for group, cols in (("batch", _BATCH), ("epoch", _EPOCH))}
        except KeyError as err:
            raise LogError(f"{path}: damaged training log (missing {err})") from None
        log["metric"] = str(f.attrs.get("metric", ""))
        log["complete"] = bool(f.attrs.get("complete", False))
        log["interrupted"] = bool(f.attrs.get("interrupted", False))
        config = f.attrs.get("config")
        log["config"] = config.decode() if isinstance(config, bytes) else config
    return log


def _check_columns(path, f):
    """LogError unless each group's columns are 1-D numeric datasets of one length (read
    from their declared shapes, before any is read)."""
    for group, cols in (("batch", _BATCH), ("epoch", _EPOCH)):
        shapes = {key: f[group][key].shape for key in cols}
        kinds = {key: f[group][key].dtype.kind for key in cols}
        bad = [k for k in cols if len(shapes[k]) != 1 or kinds[k] not in "fiu"]
        if bad:
            raise LogError(f"{path}: damaged training log: /{group}/{bad[0]} has shape "
                           f"{shapes[bad[0]]} dtype kind {kinds[bad[0]]!r}; expected a 1-D "
                           f"numeric column")
        if len(set(shapes.values())) > 1:
            raise LogError(f"{path}: damaged training log: the /{group} columns differ in "
                           f"length ({', '.join(f'{k} {v[0]}' for k, v in shapes.items())})")
