"""Reading and writing safetensors files through the ``safetensors`` library (numpy API: no
pickle, no code runs): one ``model.safetensors`` or shards listed in
``model.safetensors.index.json``.  bf16 and f16 tensors are widened to the caller's dtype."""
from pathlib import Path

import numpy as np

from ..safe_files import inside_folder
from .errors import InteropError, require
from .hf_config import read_json
from ..atomic import atomic_write

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 << 20


def weight_files(model_dir):
    """The safetensors files of a model directory: ``[model.safetensors]`` or the shards its
    index names (in order, each once).  Each must be a regular file inside the directory
    (:func:`neonlite.safe_files.inside_folder`: no absolute names, ``..``, symlinks leading
    out, FIFOs or devices); index values must be file names (strings)."""
    model_dir = Path(model_dir)
    single, index = model_dir / WEIGHTS, model_dir / INDEX
    if _present(single):
        return [inside_folder(model_dir, WEIGHTS, InteropError, "weights file")]
    if _present(index):
        index = inside_folder(model_dir, INDEX, InteropError, "safetensors index")
        shards = _shards(index, read_json(index, MAX_INDEX_BYTES))
        return [inside_folder(model_dir, s, InteropError, f"shard (named by {INDEX})")
                for s in shards]
    pickled = [p.name for p in model_dir.glob("*.bin")] + [p.name for p in model_dir.glob("*.pt")]
    extra = f" ({pickled[0]} is a pickle file, which neonlite never loads)" if pickled else ""
    raise InteropError(f"{model_dir}: no {WEIGHTS} or {INDEX}{extra}")


def _present(path):
    return path.exists() or path.is_symlink()


def _shards(index, data):
    """The shard file names of safetensors index ``data`` (read from ``index``), each once."""
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InteropError(f"{index}: not a safetensors index (a JSON object with a "
                           f"'weight_map' of tensor name -> shard file)")
    for name, shard in weight_map.items():
        if not isinstance(shard, str):
            raise InteropError(f"{index}: weight_map[{name[:60]!r}] = {str(shard)[:60]}: a "
                               f"shard must be a file name (a string)")
    return list(dict.fromkeys(weight_map.values()))


def read_tensors(model_dir, dtype):
    """``name -> ndarray`` (``dtype``) of every tensor in the directory's safetensors files."""
    require("safetensors")
    from safetensors import SafetensorError, safe_open
    out = {}
    for path in weight_files(model_dir):
        try:
            with safe_open(str(path), framework="numpy") as f:
                names = list(f.keys())
                wide = [n for n in names if f.get_slice(n).get_dtype() == "BF16"]
                for name in names:
                    if name in out:
                        raise InteropError(f"{path}: tensor '{name}' is also in another shard")
                    if name not in wide:
                        out[name] = _as_dtype(f.get_tensor(name), name, path, dtype)
            if wide:
                out.update(_read_bf16(path, wide, dtype))
        except SafetensorError as err:
            raise InteropError(f"{path}: not a readable safetensors file (truncated or "
                               f"corrupt): {' '.join(str(err).split())}") from None
    return out


def _as_dtype(array, name, path, dtype):
    if array.dtype.kind not in "fiu":
        raise InteropError(f"{path}: tensor '{name}' has dtype {array.dtype}, not a number type")
    return np.ascontiguousarray(array, dtype=dtype)


def _read_bf16(path, names, dtype):
    """The bfloat16 tensors ``names`` of ``path`` (numpy has no bfloat16: the raw bits are
    widened to float32, exactly, then cast to ``dtype``)."""
    from safetensors import deserialize
    wanted = set(names)
    out = {}
    for name, spec in deserialize(Path(path).read_bytes()):
        if name in wanted:
            bits = np.frombuffer(bytes(spec["data"]), dtype="<u2").astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(spec["shape"]).astype(dtype)
    return out


def write_tensors(path, tensors, metadata=None):
    """Write ``name -> ndarray`` as one safetensors file (each tensor contiguous, its own
    dtype), atomically: an interrupted write leaves no partial file."""
    require("safetensors")
    from safetensors.numpy import save

    data = save({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata=metadata)
    with atomic_write(Path(path)) as out:
        out.write(data)
