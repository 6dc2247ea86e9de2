"""Reading and writing safetensors files through the ``safetensors`` library (numpy API: no
pickle, no code runs): one ``model.safetensors`` or shards listed in
``model.safetensors.index.json``.  bf16 and f16 tensors are widened to the caller's dtype."""
import json
from pathlib import Path

import numpy as np

from .errors import InteropError, require

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"


def weight_files(model_dir):
    """The safetensors files of a model directory: ``[model.safetensors]`` or the shards its
    index names (in order, each once)."""
    model_dir = Path(model_dir)
    single, index = model_dir / WEIGHTS, model_dir / INDEX
    if single.is_file():
        return [single]
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            shards = list(dict.fromkeys(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise InteropError(f"{index}: not a safetensors index (a JSON object with a "
                               f"'weight_map' of tensor name -> shard file)") from None
        missing = [s for s in shards if not (model_dir / s).is_file()]
        if missing:
            raise InteropError(f"{index}: shard {missing[0]!r} is missing from {model_dir}")
        return [model_dir / s for s in shards]
    pickled = [p.name for p in model_dir.glob("*.bin")] + [p.name for p in model_dir.glob("*.pt")]
    extra = f" ({pickled[0]} is a pickle file, which neonlite never loads)" if pickled else ""
    raise InteropError(f"{model_dir}: no {WEIGHTS} or {INDEX}{extra}")


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

    from ..atomic import atomic_write
    data = save({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata=metadata)
    with atomic_write(Path(path)) as out:
        out.write(data)
