"""The kernel cache key depends only on what changes the machine code: not on the terminal's
width (``COLUMNS`` or the window size of a terminal on stdin), the locale or whether the
process runs on a terminal at all (gcc wraps ``-Q --help=target`` at the terminal width)."""
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from neonlite.kernels.toolchain import CompilerNotFound, find_c_compiler

PRINT_TARGET = ("from neonlite.kernels.toolchain import find_c_compiler; "
                "print('TARGET=' + find_c_compiler().target, flush=True)")


@pytest.fixture(scope="module", autouse=True)
def needs_compiler():
    try:
        find_c_compiler()
    except CompilerNotFound as err:
        pytest.skip(f"no C compiler: {err}")


def _env(**changes):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LANG", "LC_ALL")}
    env.update(changes)
    return env


def target_through_pipe(**env):
    done = subprocess.run([sys.executable, "-c", PRINT_TARGET], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=_env(**env), timeout=120, check=True)
    return done.stdout.split("TARGET=")[1].split()[0]


def target_on_terminal(columns, **env):
    """The target as seen by a process whose stdin, stdout and stderr are a terminal of
    ``columns`` columns."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    try:
        child = subprocess.Popen([sys.executable, "-c", PRINT_TARGET], stdin=follower,
                                 stdout=follower, stderr=follower, env=_env(**env))
        os.close(follower)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        assert child.wait(timeout=120) == 0, output.decode(errors="replace")
    finally:
        os.close(leader)
    return output.decode().split("TARGET=")[1].split()[0]


def test_key_is_the_same_on_a_terminal_and_through_a_pipe():
    piped = target_through_pipe()
    assert target_on_terminal(40) == piped
    assert target_on_terminal(200) == piped


def test_key_ignores_columns_and_locale():
    base = target_through_pipe()
    assert target_through_pipe(COLUMNS="40") == base
    assert target_through_pipe(COLUMNS="120") == base
    assert target_through_pipe(LANG="de_DE.UTF-8", LC_ALL="de_DE.UTF-8") == base
