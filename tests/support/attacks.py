"""The hostile-but-fair inputs of issue 16, as data: each attack makes its input in a folder
and runs one ``neonlite`` command (or one Python entry point under the CLI's error handling),
and names a phrase its one-line error must contain.

``run_attack(attack, folder, good)`` returns ``(status, stderr)``; ``classify`` turns that into
the outcome written in the table: ``one-line error``, ``success``, ``traceback`` or
``several lines``.  ``good`` holds the paths of a valid run YAML and checkpoints
(:func:`make_good`).  Used by ``test_attacks_run_inputs.py`` and the property tests.
"""
import json
import shutil
import struct
import zlib

import h5py
import numpy as np

from neonlite.cli import main
from neonlite.cli.errors import run_guarded

GOOD = """\
backend: cpu
epochs: 1
batchsize: 16
rng_seed: 0
eval_freq: 0
dataset: {type: shapes, config: {n: 64, size: 8, classes: 4, seed: 0}}
layers:
  - {type: Conv, config: {fshape: [3, 3, 4], padding: 1, activation: {type: Rectlin}}}
  - {type: Pooling, config: {fshape: 2}}
  - {type: Affine, config: {nout: 4, activation: {type: Softmax}}}
cost: {type: GeneralizedCost, config: {costfunc: {type: CrossEntropyMulti}}}
optimizer:
  type: GradientDescentMomentum
  config: {learning_rate: 0.1, momentum_coef: 0.9}
"""
ADAM = GOOD.replace("type: GradientDescentMomentum\n  config: {learning_rate: 0.1, "
                    "momentum_coef: 0.9}", "type: Adam\n  config: {learning_rate: 0.001}")
PREFIX = "neonlite: error: "


def array_crc32(ary):
    """CRC-32 of ``ary``'s C-order bytes: what format version 2 stores in attr ``crc32``."""
    return np.uint32(zlib.crc32(np.ascontiguousarray(ary).tobytes()))


def make_good(folder, capsys=None):
    """``{"yaml": path, "ckpt": path}``: a valid run and the checkpoint it trains."""
    folder.mkdir(parents=True, exist_ok=True)
    yaml_path, ckpt = folder / "good.yaml", folder / "good.h5"
    yaml_path.write_text(GOOD)
    status = main(["train", str(yaml_path), "-q", "--save-path", str(ckpt)])
    assert status == 0 and ckpt.is_file()
    return {"yaml": yaml_path, "ckpt": ckpt}


def classify(status, err):
    lines = err.strip().splitlines()
    if err.endswith(" s)") and "HANG" in err:
        return "hang"
    if "Traceback" in err:
        return "traceback"
    if status == 0:
        return "success"
    errors = [line for line in lines if not line.startswith("neonlite: warning: ")]
    if status == 1 and len(errors) == 1 and errors[0].startswith(PREFIX):
        return "one-line error"
    return "several lines" if len(lines) > 1 else f"status {status}"


# ---- config attacks -------------------------------------------------------------------------
def config_text(edit):
    """GOOD with ``edit`` = (old, new) applied (asserting ``old`` is in it)."""
    old, new = edit
    assert old in GOOD, old
    return GOOD.replace(old, new)


def alias_bomb():
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n" + GOOD.replace("fshape: [3, 3, 4]", "fshape: *a9")


CONFIG = {
    "fshape with a zero": (("fshape: [3, 3, 4]", "fshape: [0, 3, 8]"), "fshape"),
    "fshape with a negative": (("fshape: [3, 3, 4]", "fshape: [3, 3, -4]"), "fshape"),
    "fshape too large to allocate": (("fshape: [3, 3, 4]", "fshape: [3, 3, 100000000]"),
                                     "GiB"),
    "nout too large to allocate": (("{fshape: 2}}\n", "{fshape: 2}}\n  - {type: Affine, "
                                    "config: {nout: 3000000000}}\n"), "GiB"),
    "nout: true": (("nout: 4", "nout: true"), "nout"),
    "nout: 10**23": (("nout: 4", "nout: 10**23"), "nout"),
    "a 5,000-digit integer": (("nout: 4", "nout: " + "9" * 5000), "digits"),
    "step_config: [a]": (("momentum_coef: 0.9}", "momentum_coef: 0.9, schedule: {type: "
                          "StepSchedule, config: {step_config: [a], change: 0.5}}}"),
                         "step_config"),
    "a layer named like another's": (("nout: 4,", "nout: 4, name: Conv_0,"), "Conv_0"),
    "a lone-surrogate layer name": (("nout: 4,", 'nout: 4, name: "\\ud800",'), "name"),
    "rng_seed: -5": (("rng_seed: 0", "rng_seed: -5"), "rng_seed"),
    "learning_rate: fast": (("learning_rate: 0.1", "learning_rate: fast"), "learning_rate"),
    "learning_rate: .nan": (("learning_rate: 0.1", "learning_rate: .nan"), "learning_rate"),
    "duplicate key": (("epochs: 1\n", "epochs: 1\nepochs: 2\n"), "duplicate key 'epochs'"),
    "nesting 3,000 deep": (("rng_seed: 0\n", "rng_seed: 0\ndeep: &deep " + "[" * 3000 +
                            "]" * 3000 + "\n"), "nesting"),
}


def run_config_attack(name, folder, good):
    if name == "alias bomb":
        text = alias_bomb()
    else:
        text = config_text(CONFIG[name][0])
    path = folder / "run.yaml"
    path.write_text(text)
    return ["train", str(path), "-q", "--save-path", str(folder / "out.h5")]


# ---- checkpoint attacks ---------------------------------------------------------------------
def _set_config(f, edit):
    text = f["config"][()].decode()
    old, new = edit
    assert old in text, old
    del f["config"]
    f.create_dataset("config", data=text.replace(old, new), dtype=h5py.string_dtype())


def _replace_config(f, text):
    del f["config"]
    f.create_dataset("config", data=text, dtype=h5py.string_dtype())


def _replace_param(f, data):
    group = f["params"]
    name = json.loads(group.attrs["names"])[0]
    del group[name]
    group.create_dataset(name, data=data).attrs["crc32"] = array_crc32(data)


def _first_state(f):
    states = f["optimizer/states"]
    param = next(iter(states))
    return states[param], next(iter(states[param]))


def _replace_state(f, make):
    group, key = _first_state(f)
    data = make(group[key][()])
    del group[key]
    group.create_dataset(key, data=data).attrs["crc32"] = array_crc32(data)


def _set_step(f, value):
    state = json.loads(f["optimizer"].attrs["state"])
    state["default"]["step"] = value
    f["optimizer"].attrs["state"] = json.dumps(state)


def _set_host_rng(f, change):
    state = json.loads(f["rng"].attrs["host"])
    f["rng"].attrs["host"] = json.dumps(change(state))


def _rng_bad_state(state):
    state["state"] = {"state": "x", "inc": 3}
    return state


def _param_shape(f):
    name = json.loads(f["params"].attrs["names"])[0]
    return f["params"][name].shape


CHECKPOINT = {
    "format_version 'abc'": (lambda f: f.attrs.__setitem__("format_version", "abc"),
                             "format_version"),
    "format_version an array": (lambda f: f.attrs.__setitem__("format_version", [2, 2]),
                                "format_version"),
    "format_version 1.7": (lambda f: f.attrs.__setitem__("format_version", 1.7),
                           "format_version"),
    "config a list": (lambda f: _replace_config(f, "- a\n- b\n"), "/config"),
    "config a scalar": (lambda f: _replace_config(f, "42\n"), "/config"),
    "config empty": (lambda f: _replace_config(f, ""), "/config"),
    "datatype: f8": (lambda f: _set_config(f, ("datatype: f32", "datatype: f8")), "datatype"),
    "stored backend: tpu": (lambda f: _set_config(f, ("backend: cpu", "backend: tpu")),
                            "backend"),
    "stored batchsize: abc": (lambda f: _set_config(f, ("batchsize: 16", "batchsize: abc")),
                              "batchsize"),
    "stored rng_seed: -5": (lambda f: _set_config(f, ("rng_seed: 0", "rng_seed: -5")),
                            "rng_seed"),
    "compound-dtype parameter": (lambda f: _replace_param(
        f, np.zeros(_param_shape(f), dtype=[("a", "f4"), ("b", "f4")])), "dtype"),
    "int8 parameter": (lambda f: _replace_param(f, np.zeros(_param_shape(f), np.int8)),
                       "int8"),
    "bool parameter": (lambda f: _replace_param(f, np.zeros(_param_shape(f), bool)), "bool"),
    "complex parameter": (lambda f: _replace_param(f, np.zeros(_param_shape(f), np.complex64)),
                          "complex"),
    "optimizer step 'x'": (lambda f: _set_step(f, "x"), "step"),
    "rng host not a mapping": (lambda f: _set_host_rng(f, lambda s: [1, 2]), "/rng host"),
    "rng host unknown generator": (lambda f: _set_host_rng(
        f, lambda s: {**s, "bit_generator": "Nope"}), "/rng host"),
    "rng host bad state": (lambda f: _set_host_rng(f, _rng_bad_state), "/rng host"),
    "wrong-shape optimizer state": (lambda f: _replace_state(
        f, lambda a: np.zeros(a.shape[:-1] + (a.shape[-1] + 1,), a.dtype)), "shape"),
    "int8 optimizer state": (lambda f: _replace_state(f, lambda a: a.astype(np.int8)), "int8"),
    "epoch_index -3": (lambda f: f["progress"].attrs.__setitem__("epoch_index", -3),
                       "epoch_index"),
    "huge in_shape": (lambda f: f["progress"].attrs.__setitem__(
        "in_shape", np.array([1 << 30, 1 << 30, 3], np.int64)), "in_shape"),
}


def flip_bytes(path, offset, count=16):
    """XOR ``count`` bytes of file ``path`` from ``offset`` with 0xFF."""
    with open(path, "r+b") as out:
        out.seek(offset)
        data = bytearray(out.read(count))
        out.seek(offset)
        out.write(bytes(b ^ 0xFF for b in data))


def _data_offset(path):
    with h5py.File(path, "r") as f:
        name = json.loads(f["params"].attrs["names"])[0]
        return f["params"][name].id.get_offset()


def _states_header_offset(path):
    with h5py.File(path, "r") as f:
        return h5py.h5o.get_info(f["optimizer/states"].id).addr


FILE_FLIPS = {
    "a flipped byte in parameter data": (lambda p: flip_bytes(p, _data_offset(p) + 5, 1),
                                         "checksum"),
    "16 bytes flipped in a group header": (lambda p: flip_bytes(p, _states_header_offset(p)),
                                           "damaged checkpoint"),
}


def run_checkpoint_attack(name, folder, good):
    ckpt = folder / "attacked.h5"
    shutil.copy(good["ckpt"], ckpt)
    if name in FILE_FLIPS:
        FILE_FLIPS[name][0](ckpt)
    else:
        with h5py.File(ckpt, "r+") as f:
            CHECKPOINT[name][0](f)
    if name in ("wrong-shape optimizer state", "int8 optimizer state", "optimizer step 'x'"):
        return ["train", str(good["yaml"]), "-q", "-e", "2", "--resume", str(ckpt)]
    return ["eval", str(ckpt), "--max-batches", "1"]


def run_resume_other_optimizer(folder, good):
    path = folder / "adam.yaml"
    path.write_text(ADAM)
    return ["train", str(path), "-q", "-e", "2", "--resume", str(good["ckpt"])]


# ---- data attacks ---------------------------------------------------------------------------
def idx_overflow(folder):
    path = folder / "evil-idx3-ubyte"
    path.write_bytes(bytes([0, 0, 0x08, 3]) + struct.pack(">III", 1 << 31, 1 << 31, 4))
    from neonlite.data.idx import read_idx
    return lambda: read_idx(str(path))


def text_corpus(folder, content):
    path = folder / "corpus.txt"
    path.write_text(content)
    from neonlite.data.text import TextCorpus
    return lambda: TextCorpus(str(path), seq_len=4)


DATA = {
    "IDX dims overflowing int64": (idx_overflow, "size mismatch"),
    "text of one distinct character": (lambda d: text_corpus(d, "a" * 100), "distinct"),
    "empty text file": (lambda d: text_corpus(d, ""), "corpus.txt"),
}

# ---- the table ------------------------------------------------------------------------------
ATTACKS = {**{f"config: {k}": ("config", v[1]) for k, v in CONFIG.items()},
           "config: alias bomb": ("config", "alias"),
           **{f"checkpoint: {k}": ("checkpoint", v[1]) for k, v in CHECKPOINT.items()},
           **{f"checkpoint: {k}": ("checkpoint", v[1]) for k, v in FILE_FLIPS.items()},
           "checkpoint: --resume SGD into Adam": ("resume", "optimizer"),
           **{f"data: {k}": ("data", v[1]) for k, v in DATA.items()}}


def run_attack(attack, folder, good, capsys):
    """``(status, stderr)`` of ``attack`` (a key of :data:`ATTACKS`), made in ``folder``."""
    kind, _ = ATTACKS[attack]
    name = attack.split(": ", 1)[1]
    capsys.readouterr()
    if kind == "data":
        return guarded(lambda: run_guarded(DATA[name][0](folder)), capsys)
    if kind == "config":
        argv = run_config_attack(name, folder, good)
    elif kind == "checkpoint":
        argv = run_checkpoint_attack(name, folder, good)
    else:
        argv = run_resume_other_optimizer(folder, good)
    return guarded(lambda: main(argv), capsys)


class Hang(Exception):
    """An attack ran past its time limit."""


def guarded(command, capsys, seconds=30):
    """``(status, stderr)`` of ``command()``; an exception that escapes it (what would be a
    traceback on the terminal) comes back as status None and its traceback, and a command
    still running after ``seconds`` as status None and ``HANG``."""
    import signal
    import traceback

    def expire(signum, frame):
        raise Hang()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        status = command()
    except Hang:
        return None, capsys.readouterr().err + f"HANG (still running after {seconds} s)"
    except Exception:
        return None, capsys.readouterr().err + traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return status, capsys.readouterr().err
