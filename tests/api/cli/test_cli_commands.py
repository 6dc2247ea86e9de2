"""The CLI's command set: each subcommand is a module of ``neonlite/cli/`` that registers one
command, ``kernels`` and ``generate`` answer ``--help``, the top-level help lists every command,
and ``python -m neonlite.cli`` runs."""
import subprocess
import sys

import pytest
from support.harness import CHECKOUT
from support.shapes_run import shapes_run

from neonlite.cli import main


@pytest.fixture
def config(tmp_path):
    return shapes_run(tmp_path)


def test_kernels_subcommand_is_wired(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["kernels", "--help"])
    assert exc.value.code == 0
    assert "usage: neonlite kernels" in capsys.readouterr().out


def test_generate_subcommand_is_wired(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: neonlite generate" in out and "--prompt" in out


def test_every_subcommand_is_a_module_of_the_cli_package():
    """Each module of ``neonlite.cli.SUBCOMMANDS`` lives in ``neonlite/cli/`` and registers
    exactly one command, and every module there with a ``register`` is in the list."""
    import argparse
    from pathlib import Path

    import neonlite.cli as cli
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    for module in cli.SUBCOMMANDS:
        before = set(subparsers.choices)
        module.register(subparsers)
        assert len(set(subparsers.choices) - before) == 1, module.__name__
        assert Path(module.__file__).parent == Path(cli.__file__).parent
    registering = {p.stem for p in Path(cli.__file__).parent.glob("*.py")
                   if "def register(" in p.read_text()}
    assert registering == {m.__name__.rsplit(".", 1)[1] for m in cli.SUBCOMMANDS}


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("train", "eval", "describe", "plot", "kernels", "generate"):
        assert f"    {command} " in out


def test_console_script_runs(config):
    result = subprocess.run([sys.executable, "-m", "neonlite.cli", "train", config, "-e", "1",
                             "--max-batches", "1"], capture_output=True, text=True, cwd=CHECKOUT,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "epoch 1/1: mean train cost" in result.stderr
