"""The files a ``neonlite train`` run will write, checked with the files it reads before any
data is loaded or step taken (the rule of :mod:`neonlite.output_paths`).

Outputs: ``--save-path`` (YAML ``save_path``), ``-o`` (the training log), ``--profile`` and
the paths of the YAML's callbacks (a ``ModelCheckpoint``'s file and its ``.best.h5``).
Inputs: the run's YAML (the ``--resume`` checkpoint itself when the run is read from it), the
data set's files (``input_paths()``), ``--model-file`` and
``--resume``.  One exception, the usual way to continue a run in place: ``--save-path`` may be
the ``--resume`` checkpoint, which is read whole before the first step and replaced
atomically after it.
"""
import os

from ..config.errors import ConfigError
from ..output_paths import check_outputs


def check_run_outputs(run, opts, data, callbacks=()):
    """Refuse, in one line, an output of the run (``run``: a :class:`RunConfig` with the
    flags applied; ``opts``: the parsed flags; ``data``: the made data set; ``callbacks``:
    the YAML's callbacks) that is unwritable or would replace an input or another output, and
    ``serialize`` without a ``save_path``."""
    settings = run.settings
    if settings["serialize"] and not settings["save_path"]:
        raise ConfigError(f"--serialize {settings['serialize']} (YAML: serialize) checkpoints "
                          f"every {settings['serialize']} epochs into --save-path, and no "
                          f"--save-path (YAML: save_path) was given; give one, or leave "
                          f"--serialize out")
    save = [("--save-path", settings["save_path"])]
    others = [("-o", getattr(opts, "output_file", None)),
              ("--profile", getattr(opts, "profile", None))]
    for callback in callbacks:
        others += callback.output_paths()
    inputs = [("--model-file", getattr(opts, "model_file", None))]
    resume = getattr(opts, "resume", None)
    if os.path.isfile(run.source) and not _same_file(run.source, resume):
        inputs.append(("the run's YAML", run.source))
    inputs += [("the data set's file", path) for path in data_inputs(data)]
    check_outputs(save + others, inputs)
    check_outputs(others, [("--resume", resume)])


def _same_file(path, other):
    """Whether ``other`` (a path or None) names the file ``path`` names: a run resumed from a
    checkpoint alone (``--resume CKPT``) reads its description from that checkpoint."""
    try:
        return other is not None and os.path.samefile(path, other)
    except OSError:
        return False


def data_inputs(data):
    """The files and folders data set ``data`` reads (none when it cannot say)."""
    return list(getattr(data, "input_paths", list)())
