"""Reading and writing configuration YAML.

Reading uses a subclass of ``yaml.SafeLoader`` (plain data only: no tags that build Python
objects) that also reads YAML 1.2 floats such as ``1e-3``, which YAML 1.1 would leave as a
string.  A file that does not parse gives one :class:`ConfigError` with the file, line and
column.
"""
import re
from pathlib import Path

import yaml

from .errors import ConfigError


class _Loader(yaml.SafeLoader):
    """SafeLoader reading ``1e-3`` and ``5E+2`` as floats."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9_]+(?:[eE][-+][0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def parse_yaml(text, source="<string>"):
    """The data in YAML ``text``; a :class:`ConfigError` naming ``source``, the line and the
    column when it does not parse."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = err.problem or err.context or "invalid YAML"
        context = f" ({err.context})" if err.context and err.problem else ""
        raise ConfigError(f"{where}: malformed YAML: {problem}{context}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: malformed YAML: {err}") from None


def anchored_keys(text):
    """The top-level keys of YAML ``text`` whose value carries an anchor (``key: &name ...``);
    call after :func:`parse_yaml` succeeded."""
    keys, depth, key, expect_key = set(), 0, None, True
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if depth == 1 and not expect_key and event.anchor:
                keys.add(key)
            depth += 1
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        if depth == 1 and isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            if expect_key:
                key = event.value if isinstance(event, yaml.ScalarEvent) else None
            elif isinstance(event, yaml.ScalarEvent) and event.anchor:
                keys.add(key)
            expect_key = not expect_key
        elif depth == 1 and isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            expect_key = True
    return keys


def read_text(path):
    """The text of the file at ``path``; a :class:`ConfigError` if it cannot be read."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the file ({err})") from None


def load_yaml(path):
    """Parse the YAML file at ``path`` (see :func:`parse_yaml`)."""
    return parse_yaml(read_text(path), str(path))


def dump_yaml(data):
    """YAML text of plain ``data`` (a description), keys in their given order."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
