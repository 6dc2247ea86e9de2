"""Print the shell commands of one marked block of README.md, as CI runs them.

    python .ci/readme_commands.py quick-start|tests --wheel DIST/neonlite-X-py3-none-any.whl

A block is the fenced ``sh`` code block right after a ``<!-- ci: NAME -->`` line in README.md,
so the README's commands are the very strings CI runs.  Each line (and each part of a line
joined by `` && ``) is one command, printed on its own line.  ``pip install .`` and
``pip install ".[extras]"`` install the checkout; CI installs the wheel it built from that
checkout instead, so those are printed as ``python -m pip install "WHEEL[extras]"``.  Every
other command is printed exactly as the README has it.  Exit status 1, with one line, when the
block is missing or empty.
"""
import argparse
import re
import shlex
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
INSTALL_CHECKOUT = re.compile(r"""^pip install (?P<quote>["']?)\.(?P<extras>\[[a-z0-9,_-]+\])?(?P=quote)$""")


def block(text, name):
    """The lines of the ``sh`` block after ``<!-- ci: name -->`` (None: no such block)."""
    match = re.search(r"^<!-- ci: " + re.escape(name) + r" -->\n```sh\n(.*?)^```$", text,
                      re.M | re.S)
    return None if match is None else match.group(1).splitlines()


def commands(lines, wheel):
    """Each command of ``lines`` as CI runs it (installs of the checkout use ``wheel``)."""
    out = []
    for line in lines:
        line = line.split("  #", 1)[0].strip()
        for part in filter(None, (p.strip() for p in line.split(" && "))):
            found = INSTALL_CHECKOUT.match(part)
            if found:
                part = "python -m pip install " + shlex.quote(f"{wheel}{found['extras'] or ''}")
            out.append(part)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the block's name in its <!-- ci: NAME --> marker")
    parser.add_argument("--wheel", required=True, help="the wheel to install for 'pip install .'")
    args = parser.parse_args(argv)
    lines = block(README.read_text(encoding="utf-8"), args.name)
    found = commands(lines or [], args.wheel)
    if not found:
        print(f"readme_commands: README.md has no non-empty ```sh block after "
              f"'<!-- ci: {args.name} -->'", file=sys.stderr)
        return 1
    print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
