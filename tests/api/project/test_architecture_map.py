"""The design documents stay true: every file or folder ``docs/architecture.md``,
``docs/layers.md``, ``docs/backends.md`` and ``docs/training.md`` name exists, and the map's
"what it may import" column holds for the import graph derived from the source."""
import re

from support.import_graph import ROOT, import_graph, source_modules

DOC = ROOT / "docs" / "architecture.md"
DOCS = (DOC, ROOT / "docs" / "layers.md", ROOT / "docs" / "backends.md",
        ROOT / "docs" / "training.md")
#: a backticked name that is a path: it has a file suffix or ends with "/"
PATH = re.compile(r"`([A-Za-z0-9_.*/-]+(?:\.(?:py|c|h|cu|cuh|md|yaml|yml|toml|ini|txt)|/))`")
#: folder of the map -> the import name of the modules in it
FOLDER_MODULES = {"backends/": "neonlite.backends", "kernels/": "neonlite.kernels",
                  "layers/": "neonlite.layers", "neonlite/": "neonlite"}


def _checkout_paths():
    found = set()
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if rel.parts and rel.parts[0] in (".git", "build", "dist") or "__pycache__" in rel.parts:
            continue
        found.add(rel.as_posix() + ("/" if path.is_dir() else ""))
    return found


def test_every_path_the_document_names_exists():
    """A name with a folder must be the end of a checkout path (``cpu/conv.py`` names
    ``backends/cpu/conv.py``); a bare file name must be some file's name.  A ``*`` matches
    within one name."""
    paths = _checkout_paths()
    missing = []
    named = {name for doc in DOCS for name in PATH.findall(doc.read_text())}
    for name in sorted(named):
        pattern = re.compile(r"(^|.*/)" + re.escape(name).replace(r"\*", "[^/]*") + "$")
        if not any(pattern.match(p) for p in paths):
            missing.append(name)
    assert not missing, f"the design documents name paths that do not exist: {missing}"


def map_rows():
    """{folder: [allowed entries]} from the map's table (folders and dotted module names)."""
    text = DOC.read_text()
    table = text[text.index("| folder | what it holds | what it may import |"):]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        folder = cells[0].strip("`")
        rows[folder] = re.findall(r"`([A-Za-z0-9_./]+)`", cells[2])
    return rows


def _module_prefix(folder):
    """The import-name prefix of the modules in map folder ``folder`` (None: not a source
    folder)."""
    top = next((f for f in FOLDER_MODULES if folder.startswith(f)), None)
    if top is None:
        return None
    rest = folder[len(top):].strip("/")
    return FOLDER_MODULES[top] + ("." + rest.replace("/", ".") if rest else "")


def _folder_of(module, prefixes):
    """The most specific map folder whose modules include ``module`` (the longest prefix)."""
    matching = [f for f, p in prefixes.items() if module == p or module.startswith(p + ".")]
    return max(matching, key=lambda f: len(prefixes[f]), default=None)


def test_the_map_names_every_source_folder():
    rows = map_rows()
    prefixes = {f: _module_prefix(f) for f in rows if _module_prefix(f) is not None}
    unmapped = sorted(m for m in source_modules() if _folder_of(m, prefixes) is None)
    assert not unmapped, f"modules in no folder of the map: {unmapped}"


def test_every_import_is_one_the_map_allows():
    rows = map_rows()
    prefixes = {f: _module_prefix(f) for f in rows if _module_prefix(f) is not None}
    wrong = []
    for module, imported in sorted(import_graph().items()):
        here = _folder_of(module, prefixes)
        for target in sorted(imported):
            there = _folder_of(target, prefixes)
            if there == here:
                continue
            allowed = rows[here]
            if there in allowed or target in allowed:
                continue
            wrong.append(f"{module} ({here}) imports {target} ({there}); the map allows "
                         f"{', '.join(allowed) or 'nothing'}")
    assert not wrong, "imports the map of docs/architecture.md does not allow:\n" + \
        "\n".join(wrong)
