"""Property tests: valid YAML runs and valid checkpoints mutated at random (hypothesis) end
in success or one line ``neonlite: error: ...`` -- never a traceback, a hang or a file left
behind.  Bounded in time by the settings below (about 30 s in all)."""
import os
import shutil

import h5py
import numpy as np
import pytest
from support.attacks import GOOD, classify, flip_bytes, guarded, make_good

from neonlite.cli import main

hypothesis = pytest.importorskip("hypothesis", reason="the property tests need hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# NEONLITE_FUZZ_EXAMPLES=500 NEONLITE_FUZZ_RANDOM=1 for a longer, freshly random search.
SETTINGS = settings(max_examples=int(os.environ.get("NEONLITE_FUZZ_EXAMPLES", "40")),
                    deadline=None, derandomize=not os.environ.get("NEONLITE_FUZZ_RANDOM"),
                    database=None, suppress_health_check=list(HealthCheck))
OUTCOMES = ("success", "one-line error")
YAML_PIECES = ["", " ", "-", ":", "[", "]", "{", "}", "&a", "*a", "!!python/object:os.system",
               "0", "-1", "1e400", ".nan", "true", "null", "'x'", "\n", "\n  ", "# c", "<<: *a",
               "99999999999", "fshape", "nout", "type", "config", "Conv", "\t", "\x00", "é"]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return make_good(tmp_path_factory.mktemp("good"))


def _run(capsys, argv):
    status, err = guarded(lambda: main(argv), capsys, seconds=20)
    return classify(status, err), err


@SETTINGS
@given(data=st.data())
def test_mutated_yaml_succeeds_or_fails_in_one_line(tmp_path_factory, capsys, data):
    folder = tmp_path_factory.mktemp("yaml")
    text = GOOD
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 8))
        text = text[:at] + data.draw(st.sampled_from(YAML_PIECES)) + text[at + cut:]
    path = folder / "run.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    outcome, err = _run(capsys, ["train", str(path), "-q", "--max-batches", "1", "-e", "1",
                                 "--save-path", str(folder / "out" / "c.h5")])
    assert outcome in OUTCOMES, f"{outcome} for:\n{text}\n{err[-1500:]}"
    leftovers = [p.name for p in (folder / "out").glob(".*")] if (folder / "out").exists() \
        else []
    assert not leftovers


def _mutate_attribute(f, data):
    groups = ["/", "progress", "rng", "optimizer", "params"]
    group = f[data.draw(st.sampled_from(groups))]
    keys = list(group.attrs)
    if not keys:
        return
    key = data.draw(st.sampled_from(keys))
    value = data.draw(st.one_of(st.integers(-2 ** 40, 2 ** 40), st.floats(allow_nan=True),
                                st.text(max_size=20), st.just("[]"), st.just("{}"),
                                st.just('{"step": -1}'), st.lists(st.integers(-5, 5),
                                                                   max_size=4)))
    group.attrs[key] = value if not isinstance(value, list) else np.array(value, np.int64)


@SETTINGS
@given(data=st.data())
def test_mutated_checkpoint_loads_or_fails_in_one_line(tmp_path_factory, capsys, good, data):
    folder = tmp_path_factory.mktemp("ckpt")
    ckpt = folder / "c.h5"
    shutil.copy(good["ckpt"], ckpt)
    if data.draw(st.booleans()):
        size = ckpt.stat().st_size
        for _ in range(data.draw(st.integers(1, 4))):
            flip_bytes(ckpt, data.draw(st.integers(0, size - 1)), data.draw(st.integers(1, 16)))
    else:
        with h5py.File(ckpt, "r+") as f:
            _mutate_attribute(f, data)
    command = data.draw(st.sampled_from([["eval", str(ckpt), "--max-batches", "1"],
                                         ["describe", str(ckpt)],
                                         ["train", str(good["yaml"]), "-q", "-e", "2",
                                          "--max-batches", "1", "--resume", str(ckpt)]]))
    outcome, err = _run(capsys, command)
    assert outcome in OUTCOMES, f"{outcome} for {command}:\n{err[-1500:]}"
