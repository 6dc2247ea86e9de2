"""The kernel cache never runs what another user put there.

Each hostile case plants a cache entry with a valid trailer and checksum whose shared object has
a constructor that writes a marker file, then runs neonlite on that cache in its own process
(``support.isolated``): the marker must not exist afterwards.  Files of another user are made
with ``os.chown`` (the tests run as root: ``requires("root")``).  The rules
(``kernels/cache.py``): a folder writable by other users is refused unless it is sticky and the
user's; an entry is loaded only when the descriptor it is loaded through is a regular file
owned by the user and not writable by others; the default folder is made with mode 0700.
"""
import os
import shutil
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from neonlite.doctor.cache_row import cache_row
from neonlite.doctor.report import FAIL, OK, WARN
from neonlite.kernels import specs
from neonlite.kernels.build import Builder, default_builder
from neonlite.kernels.cache import entry_name, pack_entry
from neonlite.kernels.kernel_spec import KernelSpec
from neonlite.kernels.toolchain import find_c_compiler
from support.isolated import AttackTable, neonlite_argv, python_argv, run_isolated
from support.requires import requires

pytestmark = requires("compiler", "root")

OTHER_UID = 65534
HEADER = "void fill(real *y, int64_t n, double v);\n"
SOURCE = textwrap.dedent("""\
    #include <stdint.h>
    typedef DTYPE real;
    void fill(real *y, int64_t n, double v)
    {
        for (int64_t i = 0; i < n; i++)
            y[i] = (real)v;
    }
    """)
PLANTED = textwrap.dedent("""\
    #include <stdio.h>
    __attribute__((constructor)) static void planted(void)
    {
        FILE *f = fopen(MARKER, "w");
        if (f) { fputs("planted code ran\\n", f); fclose(f); }
    }
    """)


def _spec(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fill.h").write_text(HEADER)
    (folder / "fill.c").write_text(SOURCE)
    return KernelSpec("trustfill_f64", "cpu", "fill.c", (("DTYPE", "double"),),
                      header="fill.h", root=folder)


def _planted_entry(tmp_path, marker, key, module_name, variant):
    """Entry bytes (valid trailer and checksum) of a shared object whose constructor writes
    ``marker``."""
    source = tmp_path / "planted.c"
    source.write_text(PLANTED.replace("MARKER", f'"{marker}"'))
    library = tmp_path / "planted.so"
    subprocess.run([*find_c_compiler().command, "-shared", "-fPIC", str(source), "-o",
                    str(library)], check=True, capture_output=True)
    return pack_entry(library.read_bytes(), {"variant": variant, "target": "cpu", "key": key,
                                             "module": module_name})


def _load_code(kernel_folder, cache):
    return textwrap.dedent(f"""\
        from pathlib import Path
        from neonlite.kernels.build import Builder
        from neonlite.kernels.kernel_spec import KernelSpec
        spec = KernelSpec("trustfill_f64", "cpu", "fill.c", (("DTYPE", "double"),),
                          header="fill.h", root=Path({str(kernel_folder)!r}))
        builder = Builder({str(cache) if cache else None!r})
        try:
            builder.load_cpu(spec)
        except OSError as err:
            raise SystemExit("neonlite: error: " + str(err))
        print("loaded; compiled", builder.stats["compiled"])
        """)


def _set_up(tmp_path, folder_mode, folder_uid, entry_uid, entry_mode, symlink=False):
    """A cache folder holding a planted entry of the tiny kernel; returns (cache, kernel
    folder, marker, entry path)."""
    kernels = tmp_path / "kernel"
    spec = _spec(kernels)
    key = Builder(tmp_path / "unused").cpu_key(spec)
    cache = tmp_path / "cache"
    cache.mkdir()
    marker = tmp_path / "PLANTED_CODE_RAN"
    payload = _planted_entry(tmp_path, marker, key, f"_nlk_{spec.name}_{key[:16]}", spec.name)
    entry = cache / entry_name(spec.name, key, ".so")
    target = tmp_path / "elsewhere.so" if symlink else entry
    target.write_bytes(payload)
    os.chown(target, entry_uid, entry_uid)
    os.chmod(target, entry_mode)
    if symlink:
        entry.symlink_to(target)
    os.chmod(cache, folder_mode)
    os.chown(cache, folder_uid, folder_uid)
    return cache, kernels, marker, entry


ME = os.geteuid()
API_CASES = {
    # name: (folder mode, folder owner, entry owner, entry mode, symlink, refused folder?)
    "entry of another user in my 0700 folder": (0o700, ME, OTHER_UID, 0o644, False, False),
    "my entry, writable by others (0666)": (0o700, ME, ME, 0o666, False, False),
    "my entry, group-writable (0664)": (0o700, ME, ME, 0o664, False, False),
    "entry a symlink to a planted file": (0o700, ME, ME, 0o644, True, False),
    "entry of another user in my sticky 1777 folder": (0o1777, ME, OTHER_UID, 0o644, False,
                                                       False),
    "my entry in my world-writable 0777 folder": (0o777, ME, ME, 0o644, False, True),
    "my entry in my group-writable 0770 folder": (0o770, ME, ME, 0o644, False, True),
    "my entry in another user's sticky 1777 folder": (0o1777, OTHER_UID, ME, 0o644, False,
                                                      True),
}


def test_planted_entries_never_run(tmp_path):
    table = AttackTable(tmp_path / "attacks.tsv")
    ran = []
    for index, (attack, case) in enumerate(API_CASES.items()):
        folder_mode, folder_uid, entry_uid, entry_mode, symlink, refused = case
        where = tmp_path / f"case{index}"
        cache, kernels, marker, entry = _set_up(where, folder_mode, folder_uid, entry_uid,
                                                entry_mode, symlink)
        result = table.add(attack, run_isolated(python_argv(_load_code(kernels, cache)),
                                                seconds=120))
        if marker.exists():
            ran.append(attack)
            continue
        if refused:
            assert result.outcome == "one-line error", (attack, result.stderr)
            assert "writable by other users" in result.message, attack
        else:
            assert result.outcome == "success", (attack, result.stderr)
            assert result.stdout.strip() == "loaded; compiled 1", attack
            info = os.lstat(entry)
            assert stat.S_ISREG(info.st_mode) and info.st_uid == ME, attack
            assert not info.st_mode & 0o022, attack
    assert not ran, f"planted code ran in: {ran}"


def test_my_sticky_folder_is_accepted_and_loads_without_rebuilding(tmp_path):
    spec = _spec(tmp_path / "kernel")
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o1777)
    assert Builder(cache).ensure_cpu(spec)[2] is True
    result = run_isolated(python_argv(_load_code(tmp_path / "kernel", cache)), seconds=120)
    assert result.outcome == "success", result.stderr
    assert result.stdout.strip() == "loaded; compiled 0"


def test_the_default_folder_is_made_with_mode_0700(tmp_path):
    _spec(tmp_path / "kernel")
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "NEONLITE_CACHE_DIR": ""}
    result = run_isolated(python_argv(_load_code(tmp_path / "kernel", None)), env=env,
                          seconds=120)
    assert result.outcome == "success", result.stderr
    folder = tmp_path / "xdg" / "neonlite" / "kernels"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def _warm_copy(folder, owner):
    """``folder`` holding this checkout's entry of every CPU variant (copies owned by
    ``owner``); returns the path of optree_f32's entry (a kernel every training loads)."""
    builder = default_builder()
    assert all(r.status != "failed" for r in builder.build_all("cpu", jobs=2))
    folder.mkdir()
    optree = None
    for spec in specs.variants("cpu"):
        name = entry_name(spec.name, builder.cpu_key(spec), ".so")
        shutil.copyfile(builder.cache.path(name), folder / name)
        os.chown(folder / name, owner, owner)
        if spec.name == "optree_f32":
            optree = folder / name
    return optree


TRAIN_YAML = """\
backend: cpu
epochs: 1
batchsize: 16
eval_freq: 0
dataset: {type: shapes, config: {n: 32, size: 8, classes: 4, nclass: 4, seed: 1}}
layers:
  - {type: Affine, config: {nout: 4, init: {type: GlorotUniform}, activation: {type: Softmax}}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer: {type: GradientDescentMomentum, config: {learning_rate: 0.01}}
"""


def test_training_on_a_planted_world_writable_cache_runs_no_planted_code(tmp_path):
    """A 1777 folder of another user (like a shared /tmp folder) holding every kernel, one of
    them (optree_f32, which every training loads) planted: training runs on numpy, says why
    in one warning, and the planted constructor never runs."""
    cache = tmp_path / "shared-cache"
    optree = _warm_copy(cache, OTHER_UID)
    marker = tmp_path / "PLANTED_CODE_RAN"
    key = Builder(cache).cpu_key(specs.find("optree_f32"))
    optree.write_bytes(_planted_entry(tmp_path, marker, key, f"_nlk_optree_f32_{key[:16]}",
                                      "optree_f32"))
    os.chown(optree, OTHER_UID, OTHER_UID)
    os.chmod(cache, 0o1777)
    os.chown(cache, OTHER_UID, OTHER_UID)
    (tmp_path / "run.yaml").write_text(TRAIN_YAML)
    table = AttackTable(tmp_path / "attacks.tsv")
    result = table.add("train on another user's 1777 cache with a planted optree_f32",
                       run_isolated(neonlite_argv("train", tmp_path / "run.yaml", "-q",
                                                  "--max-batches", "1"),
                                    env={"NEONLITE_CACHE_DIR": str(cache)}, seconds=300))
    assert not marker.exists(), "the planted constructor ran"
    assert result.status == 0, result.stderr
    assert "writable by other users" in result.stderr
    listed = table.add("kernels list on that cache",
                       run_isolated(neonlite_argv("kernels", "list"),
                                    env={"NEONLITE_CACHE_DIR": str(cache)}))
    assert listed.outcome == "one-line error" and "writable by other users" in listed.message


def test_doctor_refuses_a_folder_others_can_write(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(cache))
    row = cache_row()
    assert row.status == FAIL, row
    assert "refused" in row.found and "writable by other users" in row.found
    os.chmod(cache, 0o1777)
    assert cache_row().status == OK


def test_doctor_names_entries_that_are_not_mine(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    Builder(cache).cache.write(entry_name("mine", "a" * 64, ".so"), b"payload", {"ok": 1})
    theirs = Builder(cache).cache.write(entry_name("theirs", "b" * 64, ".so"), b"x", {"ok": 1})
    os.chown(theirs, OTHER_UID, OTHER_UID)
    monkeypatch.setenv("NEONLITE_CACHE_DIR", str(cache))
    row = cache_row()
    assert row.status == WARN, row
    assert "2 entries, 1 not yours (theirs-" in row.found
