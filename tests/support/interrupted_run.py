"""A ``neonlite`` command run in a subprocess that stops, after a given training step, until
the test's signal has been handled: the interrupted-and-resumed runs of the resume tests."""
import subprocess
import sys

#: neonlite train, with a callback that after the STOP-th step says READY on stdout and waits
#: (finishing that step's callbacks) until the test's signal has been handled
SCRIPT = """
import signal, sys, time
from neonlite.callbacks import FunctionCallback
from neonlite.cli import main
from neonlite.config.run import RunConfig
stop, steps, build = int(sys.argv[1]), [0], RunConfig.build_callbacks

def handled():
    return getattr(signal.getsignal(signal.SIGTERM), "__self__", None) is None

def gate(epoch, batch, cost):
    steps[0] += 1
    if steps[0] == stop:
        print("READY", flush=True)
        deadline = time.time() + 120
        while not handled() and time.time() < deadline:
            time.sleep(0.01)

RunConfig.build_callbacks = lambda self: build(self) + [FunctionCallback(on_minibatch_end=gate)]
sys.exit(main(sys.argv[2:]))
"""


def neonlite(tmp_path, stop, *argv, send=None):
    """(exit status, stderr) of ``neonlite *argv`` run by SCRIPT (gated at step ``stop``)."""
    command = [sys.executable, "-c", SCRIPT, str(stop), *map(str, argv)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True, cwd=tmp_path)
    if send is not None:
        assert child.stdout.readline().strip() == "READY"
        child.send_signal(send)
    out, err = child.communicate(timeout=600)
    return child.returncode, err
