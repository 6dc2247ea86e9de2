"""Issue 31, section 3, for ``neonlite import`` / ``export``: the output never replaces the
source model or an arbitrary folder, ``-o ''`` is refused, and an export killed at any point
of replacing an earlier one leaves the old export or the new one whole, never a mix.

Each case runs in its own process (``support.isolated``); refused ones end in one line and
leave the working folder exactly as it was (hashes of every file, no stray temporary)."""
import json
import os
import signal

import numpy as np
import pytest
from support.file_state import refused_case, snapshot
from support.isolated import AttackTable, neonlite_argv, python_argv, run_isolated

pytest.importorskip("safetensors", reason="the optional extra neonlite[hf] is not installed")

GPT2 = {"model_type": "gpt2", "vocab_size": 40, "n_embd": 16, "n_layer": 1, "n_head": 2,
        "n_positions": 8, "layer_norm_epsilon": 1e-5}

#: export with every rename, exchange and folder removal counted; the STOP-th one kills the
#: process with SIGKILL just before it happens (0: never)
KILLER = """
import os, shutil, signal, sys
import neonlite.folder_swap as swap
from neonlite.cli import main
stop, calls = int(sys.argv[1]), [0]
if os.environ.get("NO_EXCHANGE"):
    def no_exchange(a, b):
        raise OSError(38, "renameat2 is not available", str(a))
    swap.exchange = no_exchange
def counted(function):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == stop:
            os.kill(os.getpid(), signal.SIGKILL)
        return function(*args, **kwargs)
    return call
swap.os = type(os)("os_counted")
swap.os.__dict__.update(os.__dict__)
swap.os.rename = counted(os.rename)
swap.exchange = counted(swap.exchange)
swap.shutil = type(shutil)("shutil_counted")
swap.shutil.__dict__.update(shutil.__dict__)
swap.shutil.rmtree = counted(shutil.rmtree)
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def work(tmp_path):
    """``work/``: ``gpt2/`` a Hugging Face folder, ``a.h5`` and ``b.h5`` two different
    checkpoints of it, ``old/`` an export of ``a.h5``."""
    folder = tmp_path / "work"
    folder.mkdir()
    code = f"""
import json, numpy as np, neonlite
from neonlite.interop import build_hf_model, export_hf
neonlite.gen_backend("cpu", batch_size=1, rng_seed=0, datatype=np.float32)
model = build_hf_model({GPT2!r}, seq_len=8)
export_hf(model, "gpt2")
model.save("a.h5")
for p in model.parameters():
    p.value.set(p.value.get() + 1.0)
model.save("b.h5")
"""
    made = run_isolated(python_argv(code), cwd=folder)
    assert made.status == 0, made.stderr
    made = run_isolated(neonlite_argv("export", "a.h5", "-o", "old"), cwd=folder)
    assert made.status == 0, made.stderr
    return folder


@pytest.fixture
def table(tmp_path):
    return AttackTable(tmp_path / "hf_outputs.tsv")


def _refused(table, attack, folder, *argv, phrase):
    result, before, after = refused_case(table, attack, neonlite_argv(*argv), folder)
    assert result.outcome == "one-line error", result.stderr[-2000:]
    assert phrase in result.message, result.message
    assert after == before, f"{attack}: the folder changed: {set(after) ^ set(before)}"


IMPORTS = {
    "over the source's weights": ("gpt2/model.safetensors", "the model folder"),
    "over the source's config": ("gpt2/config.json", "the model folder"),
    "at the source folder": ("gpt2", "is a folder"),
    "an empty name": ("", "empty path"),
}


@pytest.mark.parametrize("attack", list(IMPORTS))
def test_import_never_overwrites_its_source(attack, work, table):
    target, phrase = IMPORTS[attack]
    _refused(table, f"import -o {attack}", work, "import", "gpt2", "-o", target, phrase=phrase)


EXPORTS = {
    "an empty name": ("", "empty path"),
    "an arbitrary folder": ("keep", "not an earlier output"),
    "the Hugging Face source with more files": ("gpt2", "not an earlier output"),
    "its own checkpoint": ("a.h5", "not a folder"),
    "the folder holding its checkpoint": (".", "not an earlier output"),
}


@pytest.mark.parametrize("attack", list(EXPORTS))
def test_export_replaces_only_an_earlier_export(attack, work, table):
    (work / "keep").mkdir()
    (work / "keep" / "notes.txt").write_text("mine")
    (work / "gpt2" / "tokenizer.json").write_text("{}")
    target, phrase = EXPORTS[attack]
    _refused(table, f"export -o {attack}", work, "export", "a.h5", "-o", target, phrase=phrase)


def test_export_over_an_earlier_export_replaces_it_whole(work, table):
    fresh = table.add("export over an earlier export", run_isolated(
        neonlite_argv("export", "b.h5", "-o", "old"), cwd=work))
    assert fresh.status == 0, fresh.stderr
    made = run_isolated(neonlite_argv("export", "b.h5", "-o", "new"), cwd=work)
    assert made.status == 0, made.stderr
    state = snapshot(work)
    assert {k: v for k, v in state.items() if k.startswith("old/")} == \
        {k.replace("new/", "old/"): v for k, v in state.items() if k.startswith("new/")}
    assert not [name for name in os.listdir(work) if name.startswith(".")]


def _export_state(folder, name):
    return {k[len(name) + 1:]: v for k, v in snapshot(folder).items()
            if k.startswith(name + "/")}


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two renames"])
def test_an_export_killed_at_any_step_leaves_old_or_new_whole(exchange, work, table):
    """SIGKILL before each rename / exchange / removal of replacing ``old`` (the export of
    a.h5) by the export of b.h5: afterwards ``old`` is the old export or the new one, whole,
    (with two renames, a kill between them leaves ``old`` missing and the old export whole
    beside it, put back by the next export), and the next export tidies every sibling."""
    made = run_isolated(neonlite_argv("export", "b.h5", "-o", "want"), cwd=work)
    assert made.status == 0, made.stderr
    first, second = _export_state(work, "old"), _export_state(work, "want")
    assert first != second and set(first) == {"config.json", "model.safetensors"}
    env = {} if exchange else {"NO_EXCHANGE": "1"}
    kills = 0
    for stop in range(1, 10):
        run = table.add(f"export killed at step {stop} ({'exchange' if exchange else 'renames'})",
                        run_isolated(python_argv(KILLER) + [str(stop), "export", "b.h5", "-o",
                                                            "old"], cwd=work, env=env))
        if run.status == 0:
            break
        assert run.status == -signal.SIGKILL, run.stderr
        kills += 1
        now = _export_state(work, "old")
        if now:
            assert now in (first, second), f"step {stop}: a mix of the two exports"
        else:
            asides = [n for n in os.listdir(work) if n.startswith(".old.old")]
            assert asides and _export_state(work, asides[0]) == first, f"step {stop}"
        redo = run_isolated(neonlite_argv("export", "a.h5", "-o", "old"), cwd=work)
        assert redo.status == 0, redo.stderr
        assert _export_state(work, "old") == first
        assert not [n for n in os.listdir(work) if n.startswith(".")], os.listdir(work)
    assert kills >= 2


def test_an_export_is_what_transformers_reads(work):
    config = json.loads((work / "old" / "config.json").read_text())
    assert config["model_type"] == "gpt2"
    from safetensors.numpy import load_file
    tensors = load_file(work / "old" / "model.safetensors")
    assert all(np.isfinite(v).all() for v in tensors.values())
