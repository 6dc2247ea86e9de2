"""``neonlite export model.h5 -o DIR``: a neonlite checkpoint of BERT or GPT-2 form as a
Hugging Face model directory (config.json + model.safetensors) that ``transformers`` loads;
``neonlite export model.h5 --format onnx -o model.onnx [--opset N] [--fold-bn]``: any
checkpoint whose layers export (``neonlite.interop.onnx``) as one ONNX file."""
from .arguments import add_verbosity
from ..backends import gen_backend
from ..interop import InteropError, export_hf, is_export_folder
from ..interop.onnx.export import DEFAULT_OPSET
from ..model import Model
from ..output_paths import check_outputs
from ..serialize import read_checkpoint

HELP = "write a checkpoint as a Hugging Face model directory or an ONNX file"
FORMATS = ("hf", "onnx")


def register(subparsers):
    parser = subparsers.add_parser("export", help=HELP, description=HELP)
    parser.add_argument("checkpoint", metavar="MODEL.h5")
    parser.add_argument("--format", choices=FORMATS, default="hf",
                        help="hf (default): a Hugging Face directory of a BERT or GPT-2 "
                             "checkpoint; onnx: an ONNX file")
    parser.add_argument("-o", "--output", required=True, metavar="DIR|FILE",
                        help="hf: the directory to write config.json and model.safetensors "
                             "into: a new one, or an earlier export (holding only those two "
                             "files), which is replaced whole; onnx: the .onnx file to write "
                             "(new, or a regular file it replaces)")
    parser.add_argument("--opset", type=int, default=None, metavar="N",
                        help="ONNX opset to write (--format onnx; default 17)")
    parser.add_argument("--fold-bn", action="store_true",
                        help="--format onnx: fold each batch norm into the convolution or "
                             "linear layer before it (one Conv or MatMul + Add, no "
                             "BatchNormalization node)")
    add_verbosity(parser, quiet=None)
    parser.set_defaults(func=command)


def command(args):
    if args.format == "onnx":
        opset = DEFAULT_OPSET if args.opset is None else args.opset
        check_outputs([("-o", args.output)], [("the checkpoint", args.checkpoint)])
    else:
        for flag, given in (("--opset", args.opset is not None), ("--fold-bn", args.fold_bn)):
            if given:
                raise InteropError(f"{flag} applies to --format onnx only")
        check_outputs([("-o", args.output, "folder", is_export_folder)],
                      [("the checkpoint", args.checkpoint)])
    gen_backend("cpu", batch_size=1)
    model = Model.from_checkpoint(read_checkpoint(args.checkpoint))
    if args.format == "onnx":
        out = model.export_onnx(args.output, opset=opset, fold_bn=args.fold_bn)
        folded = ", batch norms folded" if args.fold_bn else ""
        print(f"{out}: ONNX opset {opset} from {args.checkpoint}{folded}")
        return
    out = export_hf(model, args.output)
    print(f"{out}: config.json and model.safetensors from {args.checkpoint}")
