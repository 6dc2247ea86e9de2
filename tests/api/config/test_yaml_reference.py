"""docs/yaml_reference.md is generated from the code's own option tables
(``python -m neonlite.config.reference``): the committed file is what the generator makes
now, and it names every class a description can name, with every option."""
import subprocess
import sys

from neonlite.config import registry
from neonlite.config.build import constructor_options
from neonlite.config.reference import generate
from neonlite.config.settings import KEYS, MEANINGS
from support.harness import CHECKOUT

ROOT = CHECKOUT
DOC = ROOT / "docs" / "yaml_reference.md"


def test_the_committed_reference_is_the_generated_one():
    """The command the file's header gives, run as printed (in a fresh process, so no class a
    test defines can leak in)."""
    done = subprocess.run([sys.executable, "-m", "neonlite.config.reference", "--check",
                           str(DOC)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "python -m neonlite.config.reference -o docs/yaml_reference.md" in DOC.read_text()


def test_every_nameable_class_and_option_is_in_the_reference():
    text = DOC.read_text(encoding="utf-8")
    for kind in registry.kinds():
        for name, cls in registry.classes(kind).items():
            row = next((line for line in text.splitlines() if line.startswith(f"| `{name}` |")),
                       None)
            assert row is not None, f"{kind} {name} is not in {DOC.name}"
            for option in constructor_options(cls):
                assert f"`{option}`" in row, f"{name}'s option {option} is not in its row"
    for named in ("`streams`", "`ResetState`", "`DivergenceGuard`", "`decay_exclude`",
                  "`GeneralizedCost`"):
        assert named in text


def test_every_top_level_key_has_a_meaning():
    assert set(MEANINGS) == set(KEYS), "describe each top-level key in settings.MEANINGS"
    assert all(f"| `{key}` |" in generate() for key in KEYS)
