"""Every configuration mistake gets one line on stderr with the key path, exit status 1, no
traceback (unless -v), and nothing written."""
import re

import pytest

from neonlite.cli import main

GOOD = """\
backend: cpu
epochs: 1
batchsize: 16
rng_seed: 0
dataset:
  type: shapes
  config: {n: 64, size: 8, classes: 4, seed: 0}
layers:
  - type: Conv
    config: {fshape: [3, 3, 4], padding: 1, batch_norm: true, activation: {type: Rectlin}}
  - type: Pooling
    config: {fshape: 2}
  - type: Dropout
    config: {keep: 0.9}
  - type: Affine
    config: {nout: 4, activation: {type: Softmax}}
cost:
  type: GeneralizedCost
  config: {costfunc: {type: CrossEntropyMulti}}
optimizer:
  type: GradientDescentMomentum
  config:
    learning_rate: 0.1
    schedule: {type: StepSchedule, config: {step_config: [1], change: 0.5}}
"""


def fail(tmp_path, capsys, text, *flags):
    """Run ``neonlite train`` on ``text``; check the failure's shape; return the message."""
    config = tmp_path / "run.yaml"
    config.write_text(text)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    status = main(["train", str(config), "--save-path", str(out / "ckpt.h5"), "-o",
                   str(out / "log.h5"), *flags])
    captured = capsys.readouterr()
    assert status == 1
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    assert not any(out.iterdir()), "nothing may be written when the configuration is bad"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "run.yaml"]
    prefix = "neonlite: error: "
    assert lines[0].startswith(prefix)
    return lines[0][len(prefix):]


def test_the_good_config_trains(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(GOOD)
    assert main(["train", str(config), "-q", "--save-path", str(tmp_path / "c.h5")]) == 0
    assert (tmp_path / "c.h5").is_file()


def test_unknown_layer_type(tmp_path, capsys):
    text = GOOD.replace("  - type: Affine", "  - type: Conv2D")
    assert fail(tmp_path, capsys, text) == \
        "layers[3].type: unknown layer 'Conv2D'; did you mean 'Conv'?"


def test_misspelled_option(tmp_path, capsys):
    text = GOOD.replace("batch_norm: true, activation", "batch_norm: true, actvation")
    assert fail(tmp_path, capsys, text) == \
        "layers[0].config.actvation: unknown option of Conv; did you mean 'activation'?"


def test_unknown_option_without_a_near_name_lists_the_options(tmp_path, capsys):
    text = GOOD.replace("config: {keep: 0.9}", "config: {keep: 0.9, zebra: 1}")
    message = fail(tmp_path, capsys, text)
    assert message == "layers[2].config.zebra: unknown option of Dropout; expected one of " \
                      "keep, name"


def test_wrong_value_type(tmp_path, capsys):
    text = GOOD.replace("keep: 0.9", "keep: half")
    assert fail(tmp_path, capsys, text) == \
        "layers[2].config.keep: expected a number, got a string ('half')"


def test_wrong_value_type_of_a_boolean(tmp_path, capsys):
    text = GOOD.replace("batch_norm: true", "batch_norm: 3")
    assert fail(tmp_path, capsys, text) == \
        "layers[0].config.batch_norm: expected true or false, got an integer (3)"


def test_bad_value_reported_by_the_class_names_the_option(tmp_path, capsys):
    text = GOOD.replace("nout: 4,", "nout: -4,")
    assert fail(tmp_path, capsys, text) == \
        "layers[3].config.nout: Linear: nout must be a positive int, got -4"


def test_missing_required_option(tmp_path, capsys):
    text = GOOD.replace("config: {nout: 4, activation", "config: {activation")
    assert fail(tmp_path, capsys, text) == (
        "layers[3].config: missing required option 'nout' of Affine (its options: nout, init, "
        "bias, activation, batch_norm, name)")


def test_shape_that_does_not_fit_names_both_layers(tmp_path, capsys):
    text = GOOD.replace("type: Dropout\n    config: {keep: 0.9}",
                        "type: Conv\n    config: {fshape: [5, 5, 4]}")
    message = fail(tmp_path, capsys, text)
    assert message.startswith("layers[2]: layer 'Conv_2' (Convolution) expects an input that a "
                              "5x5 filter fits")
    assert message.endswith("but the output of 'Pooling_1' has shape (4, 4, 4)")


def test_output_that_does_not_fit_the_targets_names_the_last_layer(tmp_path, capsys):
    text = GOOD.replace("nout: 4,", "nout: 5,")
    assert fail(tmp_path, capsys, text) == (
        "layers[3]: the data set's targets have shape (4,) per example (class indices of 4 "
        "classes) but the model's output has shape (5,)")


def test_malformed_yaml_gives_line_and_column(tmp_path, capsys):
    text = GOOD.replace("  config: {n: 64, size: 8", "  config: {n: 64 size: 8")
    message = fail(tmp_path, capsys, text)
    path = re.escape(str(tmp_path / "run.yaml"))
    assert re.fullmatch(path + r":7:\d+: malformed YAML: .+", message), message
    assert message.startswith(f"{tmp_path / 'run.yaml'}:7:")


def test_malformed_indentation(tmp_path, capsys):
    text = GOOD.replace("epochs: 1\n", "epochs: 1\n  batch: 3\n")
    message = fail(tmp_path, capsys, text)
    assert re.match(re.escape(str(tmp_path / "run.yaml")) + r":3:\d+: malformed YAML", message)


def test_data_directory_without_the_files_names_them(tmp_path, capsys):
    text = GOOD.replace("  type: shapes\n  config: {n: 64, size: 8, classes: 4, seed: 0}",
                        "  type: mnist\n  config: {download: false}")
    empty = tmp_path / "data"
    empty.mkdir()
    config = tmp_path / "run.yaml"
    config.write_text(text)
    status = main(["train", str(config), "--data-dir", str(empty), "--save-path",
                   str(tmp_path / "c.h5")])
    err = capsys.readouterr().err
    assert status == 1 and len(err.strip().splitlines()) == 1
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        assert name in err
    assert str(empty / "mnist") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "run.yaml"]
    assert list(empty.iterdir()) == []


def test_misspelled_top_level_key(tmp_path, capsys):
    text = GOOD.replace("epochs: 1", "epoch: 1")
    assert fail(tmp_path, capsys, text) == "epoch: unknown key; did you mean 'epochs'?"


def test_unknown_top_level_key_must_define_an_anchor(tmp_path, capsys):
    message = fail(tmp_path, capsys, GOOD + "learning_rate: 0.1\n")
    assert message.startswith("learning_rate: unknown top-level key; expected one of backend, "
                              "epochs, batchsize")


def test_anchor_keys_are_allowed(tmp_path, capsys):
    text = GOOD.replace("rng_seed: 0\n", "rng_seed: 0\nclasses: &classes 4\n") \
        .replace("nout: 4,", "nout: *classes,")
    config = tmp_path / "run.yaml"
    config.write_text(text)
    assert main(["describe", str(config)]) == 0
    assert "Affine_3" in capsys.readouterr().out


def test_wrong_top_level_type(tmp_path, capsys):
    text = GOOD.replace("epochs: 1", "epochs: many")
    assert fail(tmp_path, capsys, text) == "epochs: expected an integer, got a string ('many')"


def test_missing_top_level_key(tmp_path, capsys):
    text = GOOD[:GOOD.index("optimizer:")]
    assert fail(tmp_path, capsys, text) == \
        "optimizer: missing required key (a run needs dataset, layers, cost, optimizer)"


def test_unknown_data_set(tmp_path, capsys):
    text = GOOD.replace("type: shapes", "type: mnsit")
    assert fail(tmp_path, capsys, text) == \
        "dataset.type: unknown data set 'mnsit'; did you mean 'mnist'?"


def test_unknown_data_set_option(tmp_path, capsys):
    text = GOOD.replace("classes: 4,", "clases: 4,")
    assert fail(tmp_path, capsys, text) == \
        "dataset.config.clases: unknown option of data set 'shapes'; did you mean 'classes'?"


def test_nested_schedule_in_optimizer(tmp_path, capsys):
    text = GOOD.replace("type: StepSchedule", "type: StepSchedul")
    assert fail(tmp_path, capsys, text) == \
        "optimizer.config.schedule.type: unknown schedule 'StepSchedul'; did you mean " \
        "'StepSchedule'?"


def test_unknown_activation_suggests_the_neonlite_name(tmp_path, capsys):
    text = GOOD.replace("{type: Rectlin}", "{type: ReLU}")
    assert fail(tmp_path, capsys, text) == \
        "layers[0].config.activation.type: unknown activation 'ReLU'; did you mean 'Rectlin'?"


def test_not_a_type_config_mapping(tmp_path, capsys):
    text = GOOD.replace("  - type: Pooling\n    config: {fshape: 2}",
                        "  - type: Pooling\n    cofig: {fshape: 2}")
    assert fail(tmp_path, capsys, text) == (
        "layers[1].cofig: unknown key; did you mean 'config'? (a layer is {type: Name, config: "
        "{option: value}})")


def test_yaml_cannot_build_python_objects(tmp_path, capsys):
    marker = tmp_path / "ran"
    text = GOOD + f"evil: !!python/object/apply:os.system ['touch {marker}']\n"
    config = tmp_path / "run.yaml"
    config.write_text(text)
    assert main(["train", str(config)]) == 1
    err = capsys.readouterr().err
    assert "could not determine a constructor for the tag" in err
    assert not marker.exists()


def test_unavailable_backend_is_one_line(tmp_path, capsys):
    from support.harness import unavailable_reason
    if unavailable_reason("gpu") is None:
        pytest.skip("a GPU backend runs here, so -b gpu does not fail")
    message = fail(tmp_path, capsys, GOOD, "-b", "gpu")
    assert message == " ".join(unavailable_reason("gpu").split())


def test_unregistered_backend_is_refused_by_the_flag(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(GOOD)
    with pytest.raises(SystemExit) as exc:
        main(["train", str(config), "-b", "tpu"])
    assert exc.value.code == 2
    assert "invalid choice: 'tpu' (choose from 'cpu', 'gpu'" in capsys.readouterr().err


def test_verbose_shows_the_traceback(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(GOOD.replace("  - type: Affine", "  - type: Conv2D"))
    assert main(["train", str(config), "-v"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.strip().splitlines()[-1] == \
        "neonlite: error: layers[3].type: unknown layer 'Conv2D'; did you mean 'Conv'?"


def test_missing_yaml_file(tmp_path, capsys):
    assert main(["train", str(tmp_path / "nope.yaml")]) == 1
    assert capsys.readouterr().err.strip() == \
        f"neonlite: error: {tmp_path / 'nope.yaml'}: no such file"
