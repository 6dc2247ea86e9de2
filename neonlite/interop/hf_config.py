"""A Hugging Face ``config.json``: reading it and checking the options neonlite can build.

The file is read only when it is a regular file inside the model folder, of at most
:data:`MAX_CONFIG_BYTES`; every size is an integer within :data:`LIMITS` (far above any BERT or
GPT-2 published, far below what would take a machine's memory in layer objects before the
memory check), every number finite, every id an integer in its range: checked before any
layer is made."""
import json
import math
from pathlib import Path

from ..safe_files import inside_folder, read_bounded
from .errors import InteropError

CONFIG = "config.json"
MAX_CONFIG_BYTES = 1 << 20
#: the largest value neonlite builds for each size of a config
LIMITS = {"vocab_size": 1 << 22, "hidden_size": 1 << 16, "n_embd": 1 << 16,
          "num_hidden_layers": 1024, "n_layer": 1024, "num_attention_heads": 1024,
          "n_head": 1024, "intermediate_size": 1 << 18, "n_inner": 1 << 18,
          "max_position_embeddings": 1 << 17, "n_positions": 1 << 17, "type_vocab_size": 1024}
#: Hugging Face activation names -> neonlite GELU forms
GELU_FORMS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}


def read_config(model_dir):
    """The ``config.json`` of ``model_dir`` as a dict."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise InteropError(f"{model_dir}: not a directory (a Hugging Face model directory holds "
                           f"{CONFIG} and model.safetensors)")
    if not (model_dir / CONFIG).exists() and not (model_dir / CONFIG).is_symlink():
        raise InteropError(f"{model_dir}: no {CONFIG}")
    path = inside_folder(model_dir, CONFIG, InteropError, "config file")
    config = read_json(path, MAX_CONFIG_BYTES)
    if not isinstance(config, dict):
        raise InteropError(f"{path}: expected a JSON object")
    return config


def read_json(path, limit):
    """The JSON value of regular file ``path`` (at most ``limit`` bytes, nested at most as deep
    as Python's parser goes); InteropError in one line otherwise."""
    raw = read_bounded(path, limit, InteropError, "JSON file")
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise InteropError(f"{path}: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise InteropError(f"{path}: not valid JSON ({err})") from None


class ConfigReader:
    """Typed access to one config with errors naming the file and key."""

    def __init__(self, config, where):
        self.config, self.where = config, where

    def count(self, key, default=None):
        """A positive integer, at most ``LIMITS[key]``."""
        value = self.config.get(key, default)
        top = LIMITS.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1 or \
                (top is not None and value > top):
            bound = f" at most {top:,}" if top is not None else ""
            raise InteropError(f"{self.where}: '{key}' must be a positive integer{bound}, got "
                               f"{_short(value)}")
        return value

    def number(self, key, default, positive=False):
        """A finite number >= 0 (> 0 with ``positive``)."""
        value = self.config.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise InteropError(f"{self.where}: '{key}' must be a finite number "
                               f"{'> 0' if positive else '>= 0'}, got {_short(value)}")
        return float(value)

    def token_id(self, key, default, vocab):
        """None or an integer token id in [0, vocab)."""
        value = self.config.get(key, default)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab:
            raise InteropError(f"{self.where}: '{key}' must be a token id, an integer in "
                               f"[0, {vocab}) (vocab_size), or null, got {_short(value)}")
        return value

    def choice(self, key, default, supported):
        """The value of ``key``, which must be one of ``supported`` (a dict or a sequence)."""
        value = self.config.get(key, default)
        if not isinstance(value, (str, bool, int, float, type(None))) or value not in supported:
            raise InteropError(f"{self.where}: {key}={_short(value)} is not supported; "
                               f"neonlite supports {', '.join(repr(s) for s in supported)}")
        return value

    def require(self, key, wanted, default):
        """``key`` must be ``wanted`` (an option neonlite does not build otherwise)."""
        value = self.config.get(key, default)
        if type(value) is not type(wanted) or value != wanted:
            raise InteropError(f"{self.where}: {key}={_short(value)} is not supported; neonlite "
                               f"supports {key}={wanted!r}")

    def gelu(self, key, default):
        return GELU_FORMS[self.choice(key, default, list(GELU_FORMS))]


def gelu_name(form):
    """The Hugging Face activation name of neonlite GELU form ``form`` ("none"/"tanh")."""
    return "gelu" if form == "none" else "gelu_new"


def _short(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
