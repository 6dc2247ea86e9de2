"""Reading and writing configuration YAML.

Reading uses a subclass of ``yaml.SafeLoader`` (plain data only: no tags that build Python
objects) that also reads YAML 1.2 floats such as ``1e-3``, which YAML 1.1 would leave as a
string.  A file that does not parse gives one :class:`ConfigError` with the file, line and
column.  So does a file that is valid YAML but hostile or ambiguous:

* nesting deeper than :data:`MAX_DEPTH` levels (checked on the event stream, before anything
  recursive runs);
* aliases that add more than :data:`MAX_NODES` values to those written in the file (an "alias
  bomb": a few lines whose values, written out, would hold 10^9 elements; a long file without
  aliases, such as 20,000 layers, adds none), or an alias inside its own anchor;
* the same key twice in one mapping (the message names the key and both lines; keys merged in
  with ``<<: *anchor`` may be overridden as YAML intends);
* an integer of more than :data:`MAX_DIGITS` digits;
* a file that is not a regular file (``/dev/zero``, a FIFO) or larger than
  :data:`MAX_FILE_BYTES`, refused before it is read.
"""
import re
from pathlib import Path

import yaml

from ..safe_files import read_bounded
from .errors import ConfigError, short_repr


MAX_DEPTH = 100
MAX_NODES = 100_000
MAX_DIGITS = 40
#: the largest YAML file read (a run description is a few KB; the 20,000-layer network of the
#: attack tests about 1 MB)
MAX_FILE_BYTES = 64 << 20
_MERGE = "tag:yaml.org,2002:merge"


class _Loader(yaml.SafeLoader):
    """SafeLoader reading ``1e-3`` and ``5E+2`` as floats, refusing duplicate keys and
    overlong integers."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {short_repr(key)} (lines {seen[key] + 1} and "
                        f"{key_node.start_mark.line + 1}); a key may appear once per mapping",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {digits} digits (at most {MAX_DIGITS})",
                node.start_mark)
        return super().construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


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
        _check_depth(text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_expansion(node)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = err.problem or err.context or "invalid YAML"
        context = f" ({err.context})" if err.context and err.problem else ""
        raise ConfigError(f"{where}: malformed YAML: {problem}{context}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: malformed YAML: {err}") from None
    except (ValueError, RecursionError) as err:
        raise ConfigError(f"{source}: unreadable YAML: {short_repr(str(err))}") from None


def _check_depth(text):
    """A MarkedYAMLError at the first collection nested deeper than :data:`MAX_DEPTH`."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nesting deeper than {MAX_DEPTH} levels", event.start_mark)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_expansion(root):
    """A MarkedYAMLError when the node graph under ``root``, with every alias written out,
    has more than :data:`MAX_NODES` nodes beyond the distinct nodes the file writes (what
    the aliases add), or an alias refers to a node that contains it.  Counts each shared
    node once (memoized), iteratively; memory grows with the file, never with the
    expansion."""
    limit = _written_nodes(root) + MAX_NODES
    sizes, active, stack = {}, set(), [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            active.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > limit:
                raise yaml.composer.ComposerError(
                    None, None, f"its aliases add more than {MAX_NODES:,} values to the "
                    f"{limit - MAX_NODES:,} it writes (a YAML alias bomb?)", node.start_mark)
            continue
        if key in sizes:
            continue
        if key in active:
            raise yaml.composer.ComposerError(None, None, "an alias inside its own anchor",
                                              node.start_mark)
        active.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in active:
                raise yaml.composer.ComposerError(None, None, "an alias inside its own anchor",
                                                  child.start_mark)
            if id(child) not in sizes:
                stack.append((child, False))


def _written_nodes(root):
    """How many distinct nodes the graph under ``root`` has (an alias's target once)."""
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(c for c in _children(node) if id(c) not in seen)
    return len(seen)


def _children(node):
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


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
    """The text of the file at ``path``, a regular file of at most :data:`MAX_FILE_BYTES`
    (``/dev/zero``, ``/dev/urandom``, a FIFO or a folder is refused before it is read); a
    :class:`ConfigError` if it cannot be read."""
    path = Path(path)
    raw = read_bounded(path, MAX_FILE_BYTES, ConfigError)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: cannot read the file (not UTF-8 text: byte offset "
                          f"{err.start})") from None


def load_yaml(path):
    """Parse the YAML file at ``path`` (see :func:`parse_yaml`)."""
    return parse_yaml(read_text(path), str(path))


def dump_yaml(data):
    """YAML text of plain ``data`` (a description), keys in their given order."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
