"""Networks and training runs described as data: neon's ``{type, config}`` YAML schema.

* :mod:`.values` turns objects into plain description values (``describe_value``),
* :mod:`.registry` lists the neonlite classes a description may name,
* :mod:`.build` makes objects from descriptions, checking every option,
* :mod:`.yaml_io` reads and writes YAML (``yaml.SafeLoader`` only),
* :mod:`.settings` checks the plain top-level settings of a run (backend, epochs, datatype, ...),
* :mod:`.run` is the top-level schema of a training run (those, and layers, cost, ...),
* :mod:`.datasets` maps the ``dataset`` entry to data loaders.

Errors are :class:`ConfigError` with the key path of the bad entry (``layers[3].type: ...``).
This module imports nothing heavy so that ``neonlite.layers`` can use ``.values``.
"""
from .errors import ConfigError

__all__ = ["ConfigError"]
