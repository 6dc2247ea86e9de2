"""Every option of every optimizer and schedule is checked against its range when the object
is made, from Python and from YAML alike: a value that would train backwards (a negative
clip norm), not at all (a clip of 0) or not as asked (a NaN clip, a negative epsilon) is
refused in one line naming the option, the value and the range.

The YAML cases run ``neonlite train`` each in its own process under a time and memory bound
(``support.isolated``) and leave the table ``optimizer_options.tsv`` in the test's folder."""
import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from support.isolated import AttackTable, neonlite_argv, run_isolated

from neonlite.config import ConfigError
from neonlite.config import registry
from neonlite.config.build import constructor_options
from neonlite.config.errors import short_repr
import neonlite.optimizers as optimizers
from neonlite.optimizers.mixed_precision import MixedPrecision

NAN, INF = math.nan, math.inf
GT0, GE0, UNIT = "a finite number > 0", "a finite number >= 0", "a finite number in [0, 1)"
GT0_NULL = "a finite number > 0 (or null)"
SGD = ("GradientDescentMomentum", {"learning_rate": 0.1, "momentum_coef": 0.9})
ADAM = ("Adam", {"learning_rate": 1e-3})

# (optimizer type, its good config, option (schedule options as "schedule.<option>"),
#  bad value, the words of the range in the message); every optimizer and schedule option
COMMON = [("learning_rate", -0.1, GT0), ("learning_rate", 0, GT0),
          ("learning_rate", NAN, GT0), ("learning_rate", INF, GT0),
          ("gradient_clip_norm", -1.0, GT0_NULL), ("gradient_clip_norm", 0, GT0_NULL),
          ("gradient_clip_norm", NAN, GT0_NULL), ("gradient_clip_norm", INF, GT0_NULL),
          ("gradient_clip_value", -1.0, GT0_NULL), ("gradient_clip_value", 0, GT0_NULL),
          ("gradient_clip_value", NAN, GT0_NULL), ("name", 5, "a string")]
OPTIMIZERS = {"GradientDescentMomentum": {"learning_rate": 0.1}, "Adam": {}, "AdamW": {},
              "RMSProp": {}, "Adagrad": {}, "Adadelta": {}}
CASES = [(kind, config, option, value, words) for kind, config in OPTIMIZERS.items()
         for option, value, words in COMMON]
CASES += [
    (*SGD, "momentum_coef", 1.0, UNIT), (*SGD, "momentum_coef", -0.1, UNIT),
    (*SGD, "wdecay", -0.01, GE0), (*SGD, "wdecay", NAN, GE0),
    ("GradientDescentMomentum", {"learning_rate": 0.1}, "nesterov", True, "momentum_coef > 0"),
    (*SGD, "decay_exclude", ["bias"], "a list of '1d', 'embeddings'"),
    (*ADAM, "beta_1", 1.0, UNIT), (*ADAM, "beta_1", -0.1, UNIT), (*ADAM, "beta_2", 1.5, UNIT),
    (*ADAM, "epsilon", -1e-8, GT0), (*ADAM, "epsilon", 0, GT0), (*ADAM, "epsilon", NAN, GT0),
    (*ADAM, "wdecay", -1.0, GE0), (*ADAM, "weight_decay", -0.1, GE0),
    (*ADAM, "weight_decay", 2000.0, "< 1 / learning_rate"),
    (*ADAM, "state_dtype", "f16", "one of 'f32', 'bf16'"),
    ("AdamW", {}, "epsilon", -1e-8, GT0), ("AdamW", {}, "weight_decay", -0.01, GE0),
    ("RMSProp", {}, "decay_rate", 1.0, UNIT), ("RMSProp", {}, "epsilon", -1e-6, GT0),
    ("Adagrad", {}, "epsilon", 0, GT0), ("Adadelta", {}, "decay", -0.5, UNIT),
    ("Adadelta", {}, "epsilon", -1e-6, GT0),
    (*SGD, "schedule.StepSchedule.change", -1.0, GT0),
    (*SGD, "schedule.StepSchedule.change", 0, GT0),
    (*SGD, "schedule.StepSchedule.change", NAN, GT0),
    (*SGD, "schedule.StepSchedule.step_config", 0, "an integer >= 1"),
    (*SGD, "schedule.StepSchedule.step_config", [-1], "epoch numbers (integers >= 0)"),
    (*SGD, "schedule.PowerSchedule.gamma", -1e-4, GE0),
    (*SGD, "schedule.PowerSchedule.power", -0.75, GE0),
    (*SGD, "schedule.CosineSchedule.min_ratio", -5.0, "a finite number in [0, 1]"),
    (*SGD, "schedule.CosineSchedule.min_ratio", 1.5, "a finite number in [0, 1]"),
    (*SGD, "schedule.CosineSchedule.total_steps", 0, "an integer >= 1"),
    (*SGD, "schedule.CosineSchedule.total_steps", 10, "> warmup_steps (10)"),
    (*SGD, "schedule.CosineSchedule.warmup_steps", -1, "an integer >= 0"),
]
SCHEDULE_CONFIGS = {"StepSchedule": {"step_config": 1, "change": 0.5},
                    "PowerSchedule": {}, "CosineSchedule": {"total_steps": 100}}


def _description(kind, config, option, value, good=False):
    """The optimizer description of a case (``good``: without the bad value):
    ``(description, key path of the option)``."""
    config = dict(config)
    if not option.startswith("schedule."):
        if not good:
            config[option] = value
        return {"type": kind, "config": config}, f"optimizer.config.{option}"
    _, schedule, name = option.split(".")
    schedule_config = dict(SCHEDULE_CONFIGS[schedule])
    if not good:
        if (schedule, name) == ("CosineSchedule", "total_steps") and value == 10:
            schedule_config["warmup_steps"] = 10
        schedule_config[name] = value
    config["schedule"] = {"type": schedule, "config": schedule_config}
    return {"type": kind, "config": config}, f"optimizer.config.schedule.config.{name}"


def _construct(desc):
    """Make a description's object by calling its classes directly (the Python API)."""
    config = {key: _construct(value) if isinstance(value, dict) and "type" in value else value
              for key, value in desc["config"].items()}
    return getattr(optimizers, desc["type"])(**config)


def _case_id(case):
    return f"{case[0]}-{case[2]}={short_repr(case[3])}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_python_refuses_each_option_out_of_range(case):
    kind, config, option, value, words = case
    desc, _ = _description(kind, config, option, value)
    _construct(_description(kind, config, option, value, good=True)[0])
    with pytest.raises(ConfigError) as err:
        _construct(desc)
    message = str(err.value)
    name = option.split(".")[-1]
    assert f"{name} must be" in message and words in message, message
    assert f"got {short_repr(value)}" in message, message
    assert "\n" not in message


def _cli_cases():
    """Each option once or more through YAML: the options every optimizer has on
    GradientDescentMomentum (all their bad values) and a negative clip norm on each other
    optimizer; every other case as it is."""
    common = {option for option, _, _ in COMMON}
    return [case for case in CASES if case[2] not in common or case[0] == SGD[0] or
            (case[2], case[3]) == ("gradient_clip_norm", -1.0)]


RUN = {"backend": "cpu", "epochs": 1, "batchsize": 16, "rng_seed": 0, "eval_freq": 0,
       "dataset": {"type": "shapes", "config": {"n": 64, "size": 8, "classes": 4, "seed": 0}},
       "layers": [{"type": "Affine", "config": {"nout": 4, "activation": {"type": "Softmax"}}}],
       "cost": {"type": "GeneralizedCost", "config": {"costfunc": {"type": "CrossEntropyMulti"}}}}


def _run_yaml(folder, optimizer, name):
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**RUN, "optimizer": optimizer}, sort_keys=False))
    return run_isolated(neonlite_argv("train", path, "-q", "--save-path", folder / f"{name}.h5"),
                        memory_mib=2048, seconds=60)


def test_yaml_refuses_each_option_out_of_range(tmp_path):
    """Through the CLI, each case in its own process: one line with the option's key path,
    the value and the range; nothing trained, nothing saved."""
    cases = _cli_cases()
    descs = [_description(*case[:4]) for case in cases]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: _run_yaml(tmp_path, descs[i][0], f"case{i}"),
                                range(len(cases))))
    table, wrong = AttackTable(tmp_path / "optimizer_options.tsv"), []
    for i, (case, (desc, path), result) in enumerate(zip(cases, descs, results)):
        table.add(_case_id(case), result)
        message = result.message
        if result.outcome != "one-line error" or f"{path}:" not in message or \
                case[4] not in message or f"got {short_repr(case[3])}" not in message or \
                (tmp_path / f"case{i}.h5").exists():
            wrong.append(f"{_case_id(case)}: {result.outcome}: {message or result.stderr[-300:]}")
    assert not wrong, "\n".join(wrong)


def test_every_option_of_every_optimizer_and_schedule_has_a_range():
    """The range table (:mod:`neonlite.optimizers.options`) covers every constructor option
    of every class a description may name, and of MixedPrecision: none is forgotten."""
    from neonlite.optimizers.options import option_table
    classes = {**registry.classes("optimizer"), **registry.classes("schedule"),
               "MixedPrecision": MixedPrecision}
    not_ranges = {"optimizer_mapping", "optimizer"}
    missing = [f"{name}.{option}" for name, cls in classes.items()
               for option in constructor_options(cls)
               if option not in option_table(cls) and option not in not_ranges]
    assert not missing, missing
    assert set(optimizers.__all__) - {"Optimizer"} <= set(classes)


MIXED = [("loss_scale", -1.0, "'dynamic', a finite number > 0"),
         ("loss_scale", "static", "'dynamic', a finite number > 0"),
         ("init_scale", 0.0, GT0), ("growth_factor", 1.0, "a finite number > 1"),
         ("backoff_factor", 1.0, "a finite number in (0, 1)"),
         ("growth_interval", 0, "an integer >= 1"), ("min_scale", NAN, GT0),
         ("max_scale", 0.5, ">= min_scale"), ("init_scale", 1e9, "in [min_scale, max_scale]"),
         ("optimizer", "sgd", "an optimizer")]


@pytest.mark.parametrize("option, value, words", MIXED, ids=[f"{o}={v!r}" for o, v, _ in MIXED])
def test_mixed_precision_refuses_each_option_out_of_range(option, value, words):
    sgd = optimizers.GradientDescentMomentum(0.1)
    kwargs = {"optimizer": sgd, option: value}
    with pytest.raises(ConfigError) as err:
        MixedPrecision(**kwargs)
    message = str(err.value)
    assert message.startswith(f"MixedPrecision: {option} must be ") and words in message, message
    assert f"got {short_repr(value)}" in message


# ---- MultiOptimizer: keys and entries ---------------------------------------------------------
def test_python_multi_optimizer_refuses_a_nested_one_and_non_optimizers():
    sgd = optimizers.GradientDescentMomentum(0.1)
    inner = optimizers.MultiOptimizer({"default": sgd})
    with pytest.raises(ConfigError, match="entry 'fc' is itself a MultiOptimizer; nesting is "
                                          "not supported"):
        optimizers.MultiOptimizer({"default": sgd, "fc": inner})
    with pytest.raises(ConfigError, match="entry 'Bias' must be an optimizer .*got 0.1"):
        optimizers.MultiOptimizer({"default": sgd, "Bias": 0.1})


def test_python_multi_optimizer_key_naming_no_layer_is_refused_before_training():
    import numpy as np
    from neonlite import Model, gen_backend
    from neonlite.data import ArrayIterator
    from neonlite.initializers import Gaussian
    from neonlite.layers import Affine, GeneralizedCost
    from neonlite.transforms import CrossEntropyMulti, Softmax
    gen_backend("cpu", batch_size=8, rng_seed=0)
    model = Model([Affine(nout=3, init=Gaussian(), activation=Softmax(), name="fc1")])
    data = ArrayIterator(np.ones((16, 5), np.float32), np.zeros(16, int), nclass=3)
    multi = optimizers.MultiOptimizer({"default": optimizers.GradientDescentMomentum(0.1),
                                       "fc9": optimizers.Adam()})
    with pytest.raises(ConfigError, match=r"optimizer_mapping key 'fc9' names no layer with "
                                          r"parameters.*fc1 \(Bias/Linear\)"):
        model.fit(data, multi, 1, GeneralizedCost(CrossEntropyMulti()), progress=False)
    assert model.step_index == 0
    for key in ("fc1", "Linear", "Bias"):
        fine = optimizers.MultiOptimizer({"default": optimizers.GradientDescentMomentum(0.1),
                                          key: optimizers.Adam()})
        model.fit(data, fine, model.epoch_index + 1, GeneralizedCost(CrossEntropyMulti()),
                  progress=False)


MULTI_CASES = {
    "a key naming no layer": ({"default": {"type": "Adam"}, "fc9": {"type": "Adam"}},
                              "optimizer.config.optimizer_mapping.fc9: ",
                              "names no layer with parameters"),
    "a nested MultiOptimizer": (
        {"default": {"type": "Adam"},
         "Bias": {"type": "MultiOptimizer", "config": {"optimizer_mapping": {
             "default": {"type": "Adam"}}}}},
        "optimizer.config.optimizer_mapping.Bias: ", "nesting is not supported"),
}


@pytest.mark.parametrize("attack", list(MULTI_CASES))
def test_yaml_multi_optimizer_mistakes_are_one_line_before_training(tmp_path, attack):
    mapping, path, words = MULTI_CASES[attack]
    result = _run_yaml(tmp_path, {"type": "MultiOptimizer",
                                  "config": {"optimizer_mapping": mapping}}, "multi")
    AttackTable(tmp_path / "multi_optimizer.tsv").add(attack, result)
    assert result.outcome == "one-line error", result.stderr
    assert path in result.message and words in result.message, result.message
    assert not (tmp_path / "multi.h5").exists()
