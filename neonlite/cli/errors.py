"""Turning the errors a user can cause into one line on stderr and an exit status."""
import contextlib
import os
import sys
import traceback
import warnings


class CommandUnavailable(RuntimeError):
    """A subcommand whose module is not part of this install."""


def user_errors():
    """The exception types that mean bad input, not a bug: reported in one line."""
    from ..backends import BackendUnavailable
    from ..config.errors import ConfigError
    from ..data.iterator import DataError
    from ..distributed import DistributedError
    from ..layers.layer import ShapeError
    from ..memory_check import NetworkTooLarge
    from ..output_paths import OutputPathError
    from ..serialize import CheckpointError
    from ..training_log import LogError
    from ..transforms.metric import MetricError
    return (ConfigError, DataError, ShapeError, BackendUnavailable, CheckpointError, LogError,
            CommandUnavailable, FloatingPointError, NetworkTooLarge, OutputPathError,
            MetricError, OSError, DistributedError)


def run_guarded(fn, verbose=False, prog="neonlite", quiet=False):
    """Call ``fn()``; return its exit status (None: 0).  A user error prints
    ``<prog>: error: <message>`` (plus the traceback with ``verbose``) and returns 1; Ctrl-C
    returns 130; a run stopped by a signal (:class:`~neonlite.interrupts.TrainingInterrupted`)
    prints its one line and returns 128 + the signal number; a closed stdout (``neonlite
    describe ... | head``) ends quietly.  Warnings print as ``<prog>: warning: <message>``, each
    once; ``quiet`` silences the numerical ones (numpy's overflow and invalid-value
    RuntimeWarnings)."""
    from ..interrupts import TrainingInterrupted
    try:
        with _one_line_warnings(prog, quiet):
            status = fn()
    except TrainingInterrupted as stopped:
        print(stopped.message(), file=sys.stderr, flush=True)
        return stopped.exit_status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except user_errors() as err:
        if verbose:
            traceback.print_exc()
        print(f"{prog}: error: {_one_line(err)}", file=sys.stderr)
        return 1
    return 0 if status is None else int(status)


@contextlib.contextmanager
def _one_line_warnings(prog, quiet):
    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{prog}: warning: {' '.join(str(message).split())}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        if quiet:
            warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _one_line(err):
    if isinstance(err, OSError) and err.filename is not None:
        text = f"{err.filename}: {err.strerror or err}"
    else:
        text = str(err.args[0]) if len(err.args) == 1 else str(err)
    return " ".join(text.split())
