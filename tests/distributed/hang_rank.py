"""Train the LeNet test network under mpirun; the last rank stops answering (SIGSTOP to
itself) at its third step, so the others must time out in a collective and end the job.

Usage: mpirun -np N python hang_rank.py LENET.yaml
"""
import os
import signal
import sys

from neonlite.callbacks import Callback
from neonlite.cli import main
from neonlite.cli import session


class HangAtStep(Callback):
    def on_minibatch_end(self, epoch, batch, cost):
        if batch == 2:
            os.kill(os.getpid(), signal.SIGSTOP)


if __name__ == "__main__":
    from neonlite.distributed import detect_world
    world = detect_world()
    if world.rank == world.size - 1:
        real = session.Callbacks

        def with_hang(*args, **kwargs):
            callbacks = real(*args, **kwargs)
            callbacks.add(HangAtStep())
            return callbacks
        session.Callbacks = with_hang
    sys.exit(main(["train", sys.argv[1], "-z", "64", "-q", "--max-batches", "8"]))
