"""``neonlite import MODEL_DIR -o model.h5 [--head none|lm|sentence-embedding|pooler]``: a
Hugging Face model directory (BERT or GPT-2, safetensors weights) as a neonlite checkpoint."""
from .arguments import add_verbosity, batch_size, positive_int
from ..backends import gen_backend
from ..interop import import_hf
from ..output_paths import check_outputs

HELP = "convert a Hugging Face model directory (BERT, GPT-2; safetensors) to a checkpoint"


def register(subparsers):
    parser = subparsers.add_parser("import", help=HELP, description=HELP)
    parser.add_argument("model_dir", metavar="MODEL_DIR",
                        help="directory with config.json and model.safetensors (or shards "
                             "with model.safetensors.index.json)")
    parser.add_argument("-o", "--output", required=True, metavar="MODEL.h5",
                        help="the neonlite checkpoint to write")
    parser.add_argument("--head", default="none",
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
    check_outputs([("-o", args.output)], [("the model folder", args.model_dir)])
    gen_backend("cpu", batch_size=args.batch_size)
    model = import_hf(args.model_dir, head=args.head, seq_len=args.seq_len)
    model.save(args.output)
    count = sum(p.value.size for p in model.parameters())
    print(f"{args.output}: {model.name} model from {args.model_dir}, head {args.head}, "
          f"{count:,} parameters, input ({model.in_shape[0]},) token ids")
