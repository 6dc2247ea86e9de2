"""The files a run's ``dataset`` entry names, found before the data set is made.

A data set class lists its file-naming options in ``file_options`` (``{option: folders}``,
``folders(data_dir)`` giving the folders of the data root to look in: ``text`` looks in
``<root>/text/`` then ``<root>/``, ``hdf5`` in ``<root>/``), and those of them that may
name a folder too in ``folder_options`` (``image_folder``'s ``root`` and ``valid``).  A relative name is looked for
first in the run's own folder (the YAML file's folder; the working folder for a run made
from text), then in those; the entry is rewritten with the absolute path found, so the
checkpoint records where the data was, and ``neonlite eval`` / ``train --resume`` find it
from any folder.  Not found: one error naming every place looked.
"""
from pathlib import Path

from ..data.locate import find_data_file
from .datasets import check_dataset, dataset_class


def resolve_data_files(desc, base_folder=None, data_dir=None, path="dataset"):
    """The canonical ``dataset`` entry ``desc`` with each file option made an absolute path
    (see the module docstring); ``base_folder`` None: the working folder."""
    desc = check_dataset(desc, path)
    cls = dataset_class(desc["type"], f"{path}.type")
    first = [Path(base_folder) if base_folder is not None else Path.cwd()]
    config = dict(desc["config"])
    folder_options = getattr(cls, "folder_options", ())
    for option, folders in getattr(cls, "file_options", {}).items():
        if config.get(option) is not None:
            kind = "folder" if option in folder_options else "file"
            what = f"{path}.config.{option}: {getattr(cls, 'name', desc['type'])} {kind}"
            config[option] = str(find_data_file(config[option], first + folders(data_dir),
                                                what, folder_too=option in folder_options))
    return {"type": desc["type"], "config": config}
