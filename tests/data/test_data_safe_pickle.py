"""The restricted unpickler: plain data and numpy arrays load; anything that could run code is
refused before it runs."""
import os
import pickle
import subprocess

import numpy as np
import pytest

from neonlite.data.iterator import DataError
from neonlite.data.safe_pickle import UnsafePickleError, safe_load, safe_loads


class _RunsShell:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _RunsSubprocess:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (subprocess.call, (["touch", str(self.marker)],))


class _Evaluates:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (eval, (f"open({str(self.marker)!r}, 'w')",))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_data_and_numpy_arrays_round_trip(protocol):
    value = {b"data": np.arange(24, dtype=np.uint8).reshape(4, 6), "labels": [3, 1, 4, 1],
             "f32": np.linspace(0, 1, 5, dtype=np.float32), "scalar": np.float64(2.5),
             "nested": ({"a": [1.5, -2, None, True]}, "text", b"raw", 3 + 4j)}
    out = safe_loads(pickle.dumps(value, protocol=protocol))
    assert out.keys() == value.keys()
    for key in (b"data", "f32"):
        assert out[key].dtype == value[key].dtype
        np.testing.assert_array_equal(out[key], value[key])
    assert out["labels"] == [3, 1, 4, 1]
    assert out["scalar"] == 2.5
    assert out["nested"] == value["nested"]


@pytest.mark.parametrize("payload,culprit", [(_RunsShell, ".system'"),
                                             (_RunsSubprocess, ".call'"),
                                             (_Evaluates, ".eval'")])
@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path, payload, culprit,
                                                                  protocol):
    marker = tmp_path / "ran"
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": payload(marker)}, protocol=protocol))
    with pytest.raises(UnsafePickleError) as err:
        safe_load(path)
    assert culprit in str(err.value)
    assert str(path) in str(err.value) and "refusing to load" in str(err.value)
    assert not marker.exists()


def test_classes_and_unlisted_numpy_functions_are_refused():
    with pytest.raises(UnsafePickleError, match="collections.OrderedDict"):
        safe_loads(pickle.dumps(__import__("collections").OrderedDict(a=1)))
    crafted = b"\x80\x02cnumpy\nload\nX\x05\x00\x00\x00x.npy\x85R."
    with pytest.raises(UnsafePickleError, match="'numpy.load'"):
        safe_loads(crafted)


def test_codecs_encode_is_limited_to_latin1():
    ok = b"\x80\x02c_codecs\nencode\nX\x02\x00\x00\x00abX\x06\x00\x00\x00latin1\x86R."
    assert safe_loads(ok) == b"ab"
    bad = b"\x80\x02c_codecs\nencode\nX\x02\x00\x00\x00abX\x04\x00\x00\x00zlib\x86R."
    with pytest.raises(UnsafePickleError, match="zlib"):
        safe_loads(bad)


def test_persistent_ids_are_refused():
    with pytest.raises(UnsafePickleError, match="persistent id"):
        safe_loads(b"\x80\x02X\x03\x00\x00\x00key\x94Q.")


def test_truncated_and_foreign_files_get_a_data_error_naming_the_file(tmp_path):
    path = tmp_path / "batch"
    path.write_bytes(pickle.dumps({"data": np.zeros(100, np.uint8)}, protocol=4)[:-20])
    with pytest.raises(DataError, match=f"{path}.*truncated|{path}.*not a readable"):
        safe_load(path)
    path.write_bytes(b"this is not a pickle at all")
    with pytest.raises(DataError, match=str(path)):
        safe_load(path)
