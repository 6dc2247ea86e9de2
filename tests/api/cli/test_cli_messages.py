"""What the CLI says to a newcomer: help texts that say what the flags do, the ``kernels
list`` table, and "1 epoch"."""
import io

import pytest

import neonlite
from neonlite.cli import main
from support.harness import CHECKOUT

EXAMPLES = CHECKOUT / "examples"


def help_of(argv, capsys):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_texts(capsys):
    top = help_of([], capsys)
    assert "check" not in top.split("kernels", 1)[1].split("generate")[0]
    for command in ("describe", "plot"):
        assert "progress bar" not in help_of([command], capsys)
    generate = help_of(["generate"], capsys)
    assert "greedy" in generate and "-b {" in generate and "(default cpu)" in generate
    kernels = help_of(["kernels", "list"], capsys)
    assert "(default: sm_80,sm_90)" in kernels and "('sm_80'" not in kernels


def test_kernels_list_has_a_header_and_aligned_columns(capsys):
    from neonlite.kernels import specs
    from neonlite.kernels.build import Builder
    from neonlite.cli.kernels import _list
    out = io.StringIO()
    _list(Builder(), None, specs.DEFAULT_CUDA_ARCHS, out)
    lines = out.getvalue().splitlines()
    header = lines[1]
    assert header.split() == ["variant", "target", "source", "defines", "state"]
    starts = [header.index(word) for word in ("target", "source", "defines", "state")]
    rows = [line for line in lines[2:] if line and not line.startswith(" ")]
    assert rows
    for row in rows:
        for start in starts:
            assert row[start - 1] == " " and row[start] != " ", (row, start)


def test_done_line_says_one_epoch(capsys):
    previous = neonlite.backends._current
    assert main(["train", str(EXAMPLES / "shapes_cnn.yaml"), "-e", "1", "--max-batches", "1",
                 "--eval-freq", "0"]) == 0
    neonlite.backends._current = previous
    done = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.startswith("done: 1 epoch in "), done
