"""``neonlite import PATH -o model.h5``: PATH a Hugging Face model directory (BERT or GPT-2,
safetensors weights; ``--head none|lm|sentence-embedding|pooler``, ``--seq-len``) or an ONNX
file (``model.onnx``: a standard CNN, ``Model.from_onnx``), as a neonlite
checkpoint.  What PATH is decides: a folder is a Hugging Face model, a file an ONNX model."""
import os

from .arguments import add_verbosity, batch_size, positive_int
from ..backends import gen_backend
from ..interop import InteropError, import_hf
from ..model import Model
from ..output_paths import check_outputs

HELP = ("convert a Hugging Face model directory (BERT, GPT-2; safetensors) or an ONNX CNN "
        "(model.onnx) to a checkpoint")


def register(subparsers):
    parser = subparsers.add_parser("import", help=HELP, description=HELP)
    parser.add_argument("model_dir", metavar="MODEL_DIR|MODEL.onnx",
                        help="a Hugging Face directory with config.json and model.safetensors "
                             "(or shards with model.safetensors.index.json), or an ONNX file "
                             "of a CNN (Conv, BatchNormalization, activations, pools, Gemm, "
                             "residual Adds, Concat; see docs/onnx.md)")
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.h5",
                        help="the neonlite checkpoint to write")
    parser.add_argument("--head", default=None,
                        choices=["none", "lm", "sentence-embedding", "pooler"],
                        help="none: the last hidden state (N, T, d); lm: token logits (GPT-2: "
                             "next token; BERT: masked token); sentence-embedding: mean "
                             "pooling + L2 normalisation (BERT); pooler: BERT's pooler, tanh "
                             "of a dense layer over the [CLS] token (N, d) (default none)")
    parser.add_argument("--seq-len", type=positive_int, default=None, metavar="T",
                        help="the sequence length the checkpoint runs at (default: the "
                             "model's maximum positions)")
    parser.add_argument("-z", "--batch-size", type=batch_size, default=1, metavar="BATCH",
                        help="the batch size stored in the checkpoint (default 1)")
    add_verbosity(parser, quiet=None)
    parser.set_defaults(func=command)


def command(args):
    if not os.path.isdir(args.model_dir) and (os.path.lexists(args.model_dir) or
                                              args.model_dir.endswith(".onnx")):
        return import_onnx_file(args)
    check_outputs([("-o", args.output)], [("the model folder", args.model_dir)])
    gen_backend("cpu", batch_size=args.batch_size)
    args.head = args.head or "none"
    model = import_hf(args.model_dir, head=args.head, seq_len=args.seq_len)
    model.save(args.output)
    count = sum(p.value.size for p in model.parameters())
    print(f"{args.output}: {model.name} model from {args.model_dir}, head {args.head}, "
          f"{count:,} parameters, input ({model.in_shape[0]},) token ids")


def import_onnx_file(args):
    """``neonlite import model.onnx -o m.h5``: the ONNX CNN as a checkpoint."""
    for flag, value in (("--head", args.head), ("--seq-len", args.seq_len)):
        if value is not None:
            raise InteropError(f"{flag} applies to a Hugging Face model folder; "
                               f"{args.model_dir} is a file (an ONNX model)")
    check_outputs([("-o", args.output)], [("the ONNX model", args.model_dir)])
    gen_backend("cpu", batch_size=args.batch_size)
    model = Model.from_onnx(args.model_dir)
    model.save(args.output)
    count = sum(p.value.size for p in model.parameters())
    print(f"{args.output}: {model.name} model from {args.model_dir} (ONNX), "
          f"{len(model.layers.leaves())} layers, {count:,} parameters, input "
          f"{model.in_shape} per example (NHWC for images)")
