"""Train one example YAML for one epoch on small data (the test's data set in place of the
example's), under mpirun or alone, through the CLI's training path; rank 0 writes a
checkpoint.

Usage: python run_example.py EXAMPLE.yaml DATASET_JSON CHECKPOINT.h5 GLOBAL_BATCH [f32|f64]
"""
import argparse
import json
import sys

from neonlite.cli.session import train
from neonlite.config.run import RunConfig


def main(argv):
    yaml_path, dataset, out, batch = argv[:4]
    datatype = argv[4] if len(argv) > 4 else "f32"
    run = RunConfig.from_file(yaml_path).override(
        dataset=json.loads(dataset), epochs=1, batchsize=int(batch), sync_bn=True,
        save_path=out, eval_freq=0, datatype=datatype, rng_seed=5)
    opts = argparse.Namespace(data_dir=None, model_file=None, resume=None, output_file=None,
                              max_batches=None, quiet=True, verbose=True)
    train(run, opts)


if __name__ == "__main__":
    main(sys.argv[1:])
