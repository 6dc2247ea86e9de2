"""Bad augmentation options given to ``neonlite train`` in the YAML: each case in its own
process under a memory and time bound must end in one ``neonlite: error:`` line naming the
option's key path (the table is written to the test's tmp folder as attacks.tsv)."""
import pytest

from support.isolated import AttackTable, neonlite_argv, run_isolated

RUN = """\
epochs: 1
batchsize: 4
dataset: {{type: shapes, config: {{n: 16, size: 16, augment: {augment}}}}}
layers:
  - {{type: Affine, config: {{nout: 8, activation: {{type: Softmax}}}}}}
cost: CrossEntropyMulti
optimizer: {{type: Adam}}
"""

CASES = [
    ("crop larger than the padded image", "[{type: pad_crop, config: {size: 30, pad: 4}}]",
     "dataset.config.augment[0]: PadCrop: crop height size=30 is larger than the padded image "
     "(16 + 2 * pad=4 = 24)"),
    ("scale range reversed", "[{type: random_resized_crop, config: {size: 8, scale: [0.9, 0.1]}}]",
     "dataset.config.augment[0].config.scale: RandomResizedCrop: scale must be a [lo, hi] pair"),
    ("ratio of zero", "[{type: random_resized_crop, config: {size: 8, ratio: [0, 2]}}]",
     "dataset.config.augment[0].config.ratio:"),
    ("mean of the wrong length", "[{type: normalize, config: {mean: [0.5, 0.5]}}]",
     "dataset.config.augment[0]: Normalize: mean has 2 values but the images have 3 channels"),
    ("std of zero", "[{type: normalize, config: {std: [1, 0, 1]}}]",
     "dataset.config.augment[0].config.std:"),
    ("unknown op", "[{type: rotate}]", "dataset.config.augment[0].type: unknown augmentation op"),
    ("normalize not last", "[normalize, flip]",
     "dataset.config.augment[0]: Normalize must be the last op"),
    ("a string, not a list", "flip", "dataset.config.augment: expected a list"),
    ("a crop of 200,000 pixels a side", "[{type: pad_crop, config: {size: 200000, pad: 100000}}]",
     "more than the"),
    ("a resize to 10 million pixels a side", "[{type: resize, config: {shorter_side: 10000000}}, "
     "{type: center_crop, config: {size: 16}}]", "dataset.config.augment[0]: Resize makes images"),
]


@pytest.mark.parametrize("name,augment,message", CASES, ids=[c[0] for c in CASES])
def test_bad_augment_options_are_one_line(tmp_path, name, augment, message):
    table = AttackTable(tmp_path / "attacks.tsv")
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(augment=augment))
    result = table.add(name, run_isolated(neonlite_argv("train", run, "-o", tmp_path / "out"),
                                          cwd=tmp_path, memory_mib=2048, seconds=120))
    assert result.outcome == "one-line error", result.stderr[-2000:]
    assert message in result.message
