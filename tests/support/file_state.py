"""What a folder holds, to show that a refused command changed nothing and left nothing.

``snapshot(folder)`` maps every entry under ``folder`` (symlinks not followed) to what it is:
``("file", sha256 of the bytes)``, ``("link", its target)``, ``("dir",)`` or ``("other",
mode)``.  Two snapshots equal means no input was changed and no stray file (a temporary, a
half-written output) was left.  ``refused_case`` runs one hostile command through
:func:`support.isolated.run_isolated`, records it in an :class:`~support.isolated.AttackTable`
and returns the result with the folder's snapshots before and after.
"""
import hashlib
import os
import stat

from .isolated import run_isolated


def snapshot(folder):
    """``{relative path: state}`` of everything under ``folder`` (see the module docstring)."""
    state = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            key = os.path.relpath(path, folder)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                state[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                state[key] = ("dir",)
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    state[key] = ("file", hashlib.sha256(f.read()).hexdigest())
            else:
                state[key] = ("other", stat.S_IFMT(info.st_mode))
    return state


def refused_case(table, attack, argv, folder, *, cwd=None, env=None, memory_mib=1024,
                 seconds=120):
    """Run ``argv`` isolated (in ``cwd``, default ``folder``); returns ``(result, before,
    after)``, the snapshots of ``folder`` around the run."""
    before = snapshot(folder)
    result = table.add(attack, run_isolated(argv, cwd=cwd or folder, env=env,
                                            memory_mib=memory_mib, seconds=seconds))
    return result, before, snapshot(folder)
