"""``neonlite export model.h5 -o DIR``: a neonlite checkpoint of BERT or GPT-2 form as a
Hugging Face model directory (config.json + model.safetensors) that ``transformers`` loads."""
from .arguments import add_verbosity

HELP = "write a BERT- or GPT-2-form checkpoint as a Hugging Face model directory"


def register(subparsers):
    parser = subparsers.add_parser("export", help=HELP, description=HELP)
    parser.add_argument("checkpoint", metavar="MODEL.h5")
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="directory to write config.json and model.safetensors into: a "
                             "new one, or an earlier export (holding only those two files), "
                             "which is replaced whole")
    add_verbosity(parser, quiet=None)
    parser.set_defaults(func=command)


def command(args):
    from ..backends import gen_backend
    from ..interop import export_hf, is_export_folder
    from ..model import Model
    from ..output_paths import check_outputs
    from ..serialize import read_checkpoint
    check_outputs([("-o", args.output, "folder", is_export_folder)],
                  [("the checkpoint", args.checkpoint)])
    gen_backend("cpu", batch_size=1)
    model = Model.from_checkpoint(read_checkpoint(args.checkpoint))
    out = export_hf(model, args.output)
    print(f"{out}: config.json and model.safetensors from {args.checkpoint}")
