"""Model and data files that would read or wait on something other than themselves, or promise
sizes they do not hold (issue 31, sections 1 and 2): each case runs in its own process under a
time and memory bound (``support.isolated``) and must end in one line ``neonlite: error: ...``
naming the file, quickly, without taking memory.

HDF5 files are made hostile with h5py itself: external storage (``external=``), ``ExternalLink``,
``SoftLink``, virtual datasets (``VirtualLayout``), FIFOs (``os.mkfifo``) and gzip datasets whose
declared shape is far beyond the file.  Hugging Face folders get shard indexes that leave the
folder, FIFOs and symlinks, and config values of the wrong type or size.  The table
(attack -> outcome -> seconds, peak MiB, message) is written to ``model_file_attacks.tsv`` in
the module's temporary folder.
"""
import gzip
import json
import os
import shutil

import h5py
import numpy as np
import pytest
from support.attacks import GOOD
from support.isolated import AttackTable, neonlite_argv, python_argv, run_isolated

MEMORY_MIB = 2048
SECONDS = 20
#: a memory bomb must be refused below max(FLOOR_MIB, FILE_MULTIPLE x its file size), in time
FLOOR_MIB = 256
FILE_MULTIPLE = 4
REFUSE_SECONDS = 5.0

BERT = {"model_type": "bert", "vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 12,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0}


def api(call):
    """``python -c``: ``call`` (an expression) under the CLI's one-line error handling."""
    return python_argv("import sys\nfrom neonlite.cli.errors import run_guarded\n"
                       "import neonlite.data.hdf5_iterator as h5it\n"
                       "from neonlite.serialize import read_checkpoint\n"
                       "from neonlite.training_log import read_log\n"
                       "from neonlite.data.idx import read_idx\n"
                       "from neonlite.data.text import read_text\n"
                       f"sys.exit(run_guarded(lambda: ({call}, None)[1]))")


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """The module's folder: a trained checkpoint ``good.h5``, a training log ``good_log.h5``,
    a BERT folder ``bert/``, a secret file ``secret.txt`` outside them; and the table."""
    from neonlite.cli import main
    root = tmp_path_factory.mktemp("model_files")
    (root / "good.yaml").write_text(GOOD)
    status = main(["train", str(root / "good.yaml"), "-q", "--save-path", str(root / "good.h5"),
                   "-o", str(root / "good_log.h5")])
    assert status == 0
    (root / "secret.txt").write_text("root:x:0:0:root:/root:/bin/bash\n" * 64)
    _bert_folder(root / "bert")
    return {"root": root, "table": AttackTable(root / "model_file_attacks.tsv")}


def _bert_folder(path):
    import neonlite
    from neonlite.interop import build_hf_model, export_hf
    neonlite.gen_backend("cpu", batch_size=1, rng_seed=0, datatype=np.float32)
    export_hf(build_hf_model(BERT, seq_len=8), path)


def _copy(place, name, new):
    target = place["root"] / new
    shutil.copyfile(place["root"] / name, target)
    return target


def _first_param(f):
    return "params/" + json.loads(f["params"].attrs["names"])[0]


def _replace_param(path, make):
    """Replace the first parameter dataset of checkpoint ``path`` by ``make(group, name,
    old)`` (old: the array it held)."""
    with h5py.File(path, "r+") as f:
        name = _first_param(f)
        old = f[name][()]
        crc = f[name].attrs.get("crc32")
        del f[name]
        group, leaf = name.rsplit("/", 1)
        made = make(f[group], leaf, old)
        if crc is not None and isinstance(made, h5py.Dataset):
            made.attrs["crc32"] = crc


def ckpt_external_storage(place, target, version=2):
    """A checkpoint whose first parameter is stored in ``target`` (not in the file)."""
    path = _copy(place, "good.h5", f"external_{os.path.basename(target)}_v{version}.h5")

    def make(group, leaf, old):
        return group.create_dataset(leaf, shape=old.shape, dtype=old.dtype,
                                    external=[(str(target), 0, h5py.h5f.UNLIMITED)])
    _replace_param(path, make)
    if version == 1:
        with h5py.File(path, "r+") as f:
            f.attrs["format_version"] = 1
    return path


def ckpt_external_link(place):
    path = _copy(place, "good.h5", "external_link.h5")
    other = _copy(place, "good.h5", "other.h5")
    with h5py.File(path, "r+") as f:
        name = _first_param(f)
        del f[name]
        f[name] = h5py.ExternalLink(str(other), name)
    return path


def ckpt_soft_link(place):
    path = _copy(place, "good.h5", "soft_link.h5")
    with h5py.File(path, "r+") as f:
        names = json.loads(f["params"].attrs["names"])
        del f["params/" + names[0]]
        f["params/" + names[0]] = h5py.SoftLink("/params/" + names[1])
    return path


def ckpt_virtual(place, source_exists=True):
    path = _copy(place, "good.h5", f"virtual_{source_exists}.h5")
    source = place["root"] / ("vsource.h5" if source_exists else "missing_source.h5")
    with h5py.File(place["root"] / "good.h5", "r") as f:
        name = _first_param(f)
        old = f[name][()]
    if source_exists:
        with h5py.File(source, "w") as s:
            s.create_dataset("data", data=np.ones_like(old))

    def make(group, leaf, _):
        layout = h5py.VirtualLayout(shape=old.shape, dtype=old.dtype)
        layout[...] = h5py.VirtualSource(str(source), "data", shape=old.shape)
        return group.create_virtual_dataset(leaf, layout, fillvalue=0)
    _replace_param(path, make)
    return path


def ckpt_gzip_bomb(place, columns=2 ** 21):
    """A small file declaring a (512, columns) float32 gzip dataset (never written: every
    chunk reads as the fill value)."""
    path = _copy(place, "good.h5", f"gzip_bomb_{columns}.h5")

    def make(group, leaf, _):
        return group.create_dataset(leaf, shape=(512, columns), dtype=np.float32,
                                    chunks=(64, 4096), compression="gzip")
    _replace_param(path, make)
    return path


def fifo(place, name):
    path = place["root"] / name
    if not path.exists():
        os.mkfifo(path)
    return path


def log_row_bomb(place, rows=2 * 10 ** 9):
    path = _copy(place, "good_log.h5", "log_bomb.h5")
    with h5py.File(path, "r+") as f:
        del f["batch/cost"]
        f["batch"].create_dataset("cost", shape=(rows,), dtype=np.float64, chunks=(1 << 16,),
                                  compression="gzip")
    return path


def log_ragged(place):
    path = _copy(place, "good_log.h5", "log_ragged.h5")
    with h5py.File(path, "r+") as f:
        cost = f["batch/cost"][()]
        del f["batch/cost"]
        f["batch"].create_dataset("cost", data=cost[:-1])
    return path


def log_external_link(place):
    path = _copy(place, "good_log.h5", "log_link.h5")
    with h5py.File(path, "r+") as f:
        del f["batch/cost"]
        f["batch/cost"] = h5py.ExternalLink(str(place["root"] / "good_log.h5"), "batch/cost")
    return path


def data_file(place, name, make_x):
    path = place["root"] / name
    with h5py.File(path, "w") as f:
        make_x(f)
        f.create_dataset("y", data=np.zeros(16, dtype=np.int64))
    return path


def data_external(place):
    return data_file(place, "data_external.h5", lambda f: f.create_dataset(
        "x", shape=(16, 4), dtype=np.uint8,
        external=[(str(place["root"] / "secret.txt"), 0, h5py.h5f.UNLIMITED)]))


def data_virtual(place):
    source = place["root"] / "data_source.h5"
    with h5py.File(source, "w") as s:
        s.create_dataset("x", data=np.ones((16, 4), np.float32))

    def make(f):
        layout = h5py.VirtualLayout(shape=(16, 4), dtype=np.float32)
        layout[...] = h5py.VirtualSource(str(source), "x", shape=(16, 4))
        f.create_virtual_dataset("x", layout)
    return data_file(place, "data_virtual.h5", make)


def data_huge_example(place):
    return data_file(place, "data_huge_example.h5", lambda f: f.create_dataset(
        "x", shape=(16, 2 ** 34), dtype=np.float32, chunks=(1, 1 << 16), compression="gzip"))


def hf_folder(place, name, config=None, **files):
    """A copy of the BERT folder with ``config`` entries changed and ``files`` written
    (name -> text, or a callable making the path)."""
    path = place["root"] / name
    if path.exists():
        return path
    shutil.copytree(place["root"] / "bert", path)
    if config is not None:
        data = json.loads((path / "config.json").read_text())
        data.update(config)
        (path / "config.json").write_text(json.dumps(data))
    for file, content in files.items():
        target = path / file
        if callable(content):
            target.unlink(missing_ok=True)
            content(target)
        else:
            target.write_text(content)
    return path


def hf_index_outside(place):
    outside = place["root"] / "other_model"
    if not outside.exists():
        shutil.copytree(place["root"] / "bert", outside)
    path = hf_folder(place, "hf_index_outside")
    (path / "model.safetensors").unlink()
    index = {"weight_map": {"embeddings.word_embeddings.weight":
                            "../other_model/model.safetensors"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return path


def hf_index(place, name, weight_map):
    path = hf_folder(place, name)
    (path / "model.safetensors").unlink(missing_ok=True)
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return path


def hf_weights_symlink(place):
    outside = place["root"] / "other_model"
    if not outside.exists():
        shutil.copytree(place["root"] / "bert", outside)
    return hf_folder(place, "hf_symlink", **{"model.safetensors": lambda p: p.symlink_to(
        outside / "model.safetensors")})


def hf_nested(place):
    path = hf_folder(place, "hf_nested")
    (path / "config.json").write_text("[" * 100000 + "]" * 100000)
    return path


def mnist_gz_bomb(place, inflated_mib=1024):
    """A gzipped IDX file whose header declares 10 images of 28x28 but which inflates to
    ``inflated_mib`` MiB."""
    path = place["root"] / "train-images-idx3-ubyte.gz"
    if not path.exists():
        header = bytes([0, 0, 8, 3]) + b"".join(int(d).to_bytes(4, "big") for d in (10, 28, 28))
        zeros = bytes(16 << 20)
        with gzip.open(path, "wb", compresslevel=1) as f:
            f.write(header)
            for _ in range(inflated_mib // 16):
                f.write(zeros)
    return path


def train_yaml_on(place, data_path):
    """A run whose data set is the text file at ``data_path``."""
    text = GOOD.replace("dataset: {type: shapes, config: {n: 64, size: 8, classes: 4, seed: 0}}",
                        f"dataset: {{type: text, config: {{filename: {data_path.name}, "
                        f"seq_len: 8}}}}")
    path = place["root"] / f"train_on_{data_path.name}.yaml"
    path.write_text(text)
    return path


# attack -> (argv maker (place -> argv), phrase its one line must hold, memory bomb?)
CASES = {
    "checkpoint v2: parameter stored externally in a secret file": (
        lambda p: neonlite_argv("describe", ckpt_external_storage(p, p["root"] / "secret.txt")),
        "external", False),
    "checkpoint v1: parameter stored externally in a secret file": (
        lambda p: neonlite_argv("describe", ckpt_external_storage(p, p["root"] / "secret.txt",
                                                                  version=1)),
        "external", False),
    "checkpoint: parameter stored externally on a FIFO": (
        lambda p: neonlite_argv("describe", ckpt_external_storage(p, fifo(p, "ext_fifo"))),
        "external", False),
    "checkpoint: parameter stored externally on /dev/zero": (
        lambda p: neonlite_argv("describe", ckpt_external_storage(p, "/dev/zero")),
        "external", False),
    "checkpoint: ExternalLink to another file": (
        lambda p: neonlite_argv("describe", ckpt_external_link(p)), "external link", False),
    "checkpoint: SoftLink": (
        lambda p: neonlite_argv("describe", ckpt_soft_link(p)), "soft link", False),
    "checkpoint: virtual dataset over another file": (
        lambda p: neonlite_argv("describe", ckpt_virtual(p)), "virtual", False),
    "checkpoint: virtual dataset over a missing file": (
        lambda p: neonlite_argv("describe", ckpt_virtual(p, source_exists=False)), "virtual",
        False),
    "checkpoint: a FIFO at the path": (
        lambda p: neonlite_argv("describe", fifo(p, "ckpt_fifo.h5")), "not a regular file",
        False),
    "checkpoint: load then save a parameter stored externally": (
        lambda p: python_argv(
            "import sys\nfrom neonlite.cli.errors import run_guarded\nimport neonlite\n"
            "neonlite.gen_backend('cpu', batch_size=1)\n"
            f"sys.exit(run_guarded(lambda: (neonlite.Model.load("
            f"{str(ckpt_external_storage(p, p['root'] / 'secret.txt', 1))!r})"
            f".save({str(p['root'] / 'laundered.h5')!r}), None)[1]))"), "external", False),
    "checkpoint: 45 KB declaring a (512, 2**21) gzip dataset": (
        lambda p: neonlite_argv("describe", ckpt_gzip_bomb(p)), "declares", True),
    "checkpoint: declaring a (512, 2**22) gzip dataset": (
        lambda p: neonlite_argv("describe", ckpt_gzip_bomb(p, 2 ** 22)), "declares", True),
    "training log: 2e9 rows declared (plot)": (
        lambda p: neonlite_argv("plot", log_row_bomb(p), "-o", p["root"] / "bomb.png"),
        "declares", True),
    "training log: columns of different lengths (plot)": (
        lambda p: neonlite_argv("plot", log_ragged(p), "-o", p["root"] / "ragged.png"),
        "differ in length", False),
    "training log: ExternalLink (plot)": (
        lambda p: neonlite_argv("plot", log_external_link(p), "-o", p["root"] / "link.png"),
        "external link", False),
    "training log: a FIFO at the path (plot)": (
        lambda p: neonlite_argv("plot", fifo(p, "log_fifo.h5"), "-o", p["root"] / "f.png"),
        "not a regular file", False),
    "HDF5 data: x stored externally": (
        lambda p: api(f"h5it.HDF5Dataset({str(data_external(p))!r})"), "external", False),
    "HDF5 data: x a virtual dataset": (
        lambda p: api(f"h5it.HDF5Dataset({str(data_virtual(p))!r})"), "virtual", False),
    "HDF5 data: a FIFO at the path": (
        lambda p: api(f"h5it.HDF5Dataset({str(fifo(p, 'data_fifo.h5'))!r})"),
        "not a regular file", False),
    "HDF5 data: examples of 2**34 values declared": (
        lambda p: api("(__import__('neonlite').gen_backend('cpu', batch_size=4), "
                      f"h5it.HDF5Iterator({str(data_huge_example(p))!r}))"),
        "memory", True),
    "HF: shard index naming ../other_model/model.safetensors": (
        lambda p: neonlite_argv("import", hf_index_outside(p), "-o", p["root"] / "o1.h5"),
        "outside", False),
    "HF: model.safetensors a symlink out of the folder": (
        lambda p: neonlite_argv("import", hf_weights_symlink(p), "-o", p["root"] / "o2.h5"),
        "outside", False),
    "HF: config.json a FIFO": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_fifo", **{
            "config.json": os.mkfifo}), "-o", p["root"] / "o3.h5"),
        "not a regular file", False),
    "HF: shard index value 5": (
        lambda p: neonlite_argv("import", hf_index(p, "hf_index5", {"a.weight": 5}),
                                "-o", p["root"] / "o4.h5"), "shard", False),
    "HF: shard index value /etc/passwd": (
        lambda p: neonlite_argv("import", hf_index(p, "hf_index_abs", {"a": "/etc/passwd"}),
                                "-o", p["root"] / "o5.h5"), "outside", False),
    "HF: num_hidden_layers 1000000": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_layers", {
            "num_hidden_layers": 1000000}), "-o", p["root"] / "o6.h5"),
        "num_hidden_layers", True),
    "HF: max_position_embeddings 1000000": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_positions", {
            "max_position_embeddings": 1000000}), "-o", p["root"] / "o7.h5"),
        "max_position_embeddings", True),
    "HF: vocab_size 10**8": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_vocab", {"vocab_size": 10 ** 8}),
                                "-o", p["root"] / "o8.h5"), "vocab_size", True),
    "HF: hidden_size 10**5": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_hidden", {
            "hidden_size": 100000, "num_attention_heads": 1}), "-o", p["root"] / "o9.h5"),
        "hidden_size", True),
    "HF: sizes within limits implying 800 GiB of parameters": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_huge", {
            "hidden_size": 16384, "num_attention_heads": 128, "intermediate_size": 65536,
            "num_hidden_layers": 64}), "-o", p["root"] / "o17.h5"), "memory", True),
    "HF: model_type a list": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_type_list", {
            "model_type": ["bert"]}), "-o", p["root"] / "o10.h5"), "model_type", False),
    "HF: pad_token_id a string": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_pad_str", {"pad_token_id": "0"}),
                                "-o", p["root"] / "o11.h5"), "pad_token_id", False),
    "HF: pad_token_id negative": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_pad_neg", {"pad_token_id": -5}),
                                "-o", p["root"] / "o12.h5"), "pad_token_id", False),
    "HF: pad_token_id huge": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_pad_huge", {
            "pad_token_id": 10 ** 30}), "-o", p["root"] / "o13.h5"), "pad_token_id", False),
    "HF: config.json nested 100000 deep": (
        lambda p: neonlite_argv("import", hf_nested(p), "-o", p["root"] / "o14.h5"),
        "config.json", False),
    "HF: layer_norm_eps NaN": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_eps_nan", **files_eps("NaN")),
                                "-o", p["root"] / "o15.h5"), "layer_norm_eps", False),
    "HF: layer_norm_eps Infinity": (
        lambda p: neonlite_argv("import", hf_folder(p, "hf_eps_inf", **files_eps("Infinity")),
                                "-o", p["root"] / "o16.h5"), "layer_norm_eps", False),
    "MNIST: 10 images declared, 1 GiB inflated": (
        lambda p: api(f"read_idx({str(mnist_gz_bomb(p))!r})"), "header", True),
    "train: /dev/zero as the YAML": (
        lambda p: neonlite_argv("train", "/dev/zero"), "not a regular file", True),
    "train: /dev/urandom as the YAML": (
        lambda p: neonlite_argv("train", "/dev/urandom"), "not a regular file", True),
    "train: a FIFO as the YAML": (
        lambda p: neonlite_argv("train", fifo(p, "run_fifo.yaml")), "not a regular file",
        False),
    "text data: /dev/zero": (
        lambda p: api("read_text('/dev/zero')"), "not a regular file", True),
    "text data: a FIFO named as the text file": (
        lambda p: neonlite_argv("train", train_yaml_on(p, fifo(p, "corpus.txt")),
                                "--data-dir", p["root"], "--max-batches", "1"),
        "not a regular file", False),
}


def files_eps(word):
    """A callable writing config.json with ``layer_norm_eps`` the bare JSON word ``word``."""
    def write(path):
        data = json.loads((path.parent.parent / "bert" / "config.json").read_text())
        data["layer_norm_eps"] = "@@"
        path.write_text(json.dumps(data).replace('"@@"', word))
    return {"config.json": write}


@pytest.mark.parametrize("attack", list(CASES))
def test_model_file_attack_is_refused_in_one_line(attack, place):
    make, phrase, bomb = CASES[attack]
    argv = make(place)
    result = place["table"].add(attack, run_isolated(
        [str(a) for a in argv], cwd=place["root"], memory_mib=MEMORY_MIB, seconds=SECONDS))
    assert result.outcome == "one-line error", (result.outcome, result.stderr[-2000:])
    assert phrase.lower() in result.message.lower(), result.message
    if bomb:
        assert result.seconds < REFUSE_SECONDS, result.seconds
        assert result.peak_mib < max(FLOOR_MIB, FILE_MULTIPLE * _input_mib(argv)), \
            result.peak_mib


def _input_mib(argv):
    """The size in MiB of the largest regular file named in ``argv``."""
    sizes = [os.path.getsize(a) for a in map(str, argv) if os.path.isfile(a)]
    return max(sizes, default=0) / (1 << 20)


def test_a_log_written_with_gzip_chunks_is_read(place):
    """A training log whose columns are chunked and gzip-compressed (a writer that appends
    may store them so) is read: the bound is what deflate can inflate, not the file size."""
    from neonlite.training_log import read_log
    path = _copy(place, "good_log.h5", "gzip_log.h5")
    with h5py.File(path, "r+") as f:
        for group in ("batch", "epoch"):
            for key in list(f[group]):
                data = f[group][key][()]
                del f[group][key]
                f[group].create_dataset(key, data=data, chunks=True, maxshape=(None,),
                                        compression="gzip", shuffle=True)
    expected = read_log(place["root"] / "good_log.h5")
    got = read_log(path)
    assert np.array_equal(got["batch"]["cost"], expected["batch"]["cost"])
