"""A Hugging Face ``config.json``: reading it and checking the options neonlite can build."""
import json
from pathlib import Path

from .errors import InteropError

CONFIG = "config.json"
#: Hugging Face activation names -> neonlite GELU forms
GELU_FORMS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}


def read_config(model_dir):
    """The ``config.json`` of ``model_dir`` as a dict."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise InteropError(f"{model_dir}: not a directory (a Hugging Face model directory holds "
                           f"{CONFIG} and model.safetensors)")
    path = model_dir / CONFIG
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise InteropError(f"{model_dir}: no {CONFIG}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise InteropError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise InteropError(f"{path}: expected a JSON object")
    return config


class ConfigReader:
    """Typed access to one config with errors naming the file and key."""

    def __init__(self, config, where):
        self.config, self.where = config, where

    def count(self, key, default=None):
        value = self.config.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InteropError(f"{self.where}: '{key}' must be a positive integer, got {value!r}")
        return value

    def number(self, key, default):
        value = self.config.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise InteropError(f"{self.where}: '{key}' must be a number >= 0, got {value!r}")
        return float(value)

    def choice(self, key, default, supported):
        """The value of ``key``, which must be one of ``supported`` (a dict or a sequence)."""
        value = self.config.get(key, default)
        if value not in supported:
            raise InteropError(f"{self.where}: {key}={value!r} is not supported; neonlite "
                               f"supports {', '.join(repr(s) for s in supported)}")
        return value

    def require(self, key, wanted, default):
        """``key`` must be ``wanted`` (an option neonlite does not build otherwise)."""
        value = self.config.get(key, default)
        if value != wanted:
            raise InteropError(f"{self.where}: {key}={value!r} is not supported; neonlite "
                               f"supports {key}={wanted!r}")

    def gelu(self, key, default):
        return GELU_FORMS[self.choice(key, default, list(GELU_FORMS))]


def gelu_name(form):
    """The Hugging Face activation name of neonlite GELU form ``form`` ("none"/"tanh")."""
    return "gelu" if form == "none" else "gelu_new"
