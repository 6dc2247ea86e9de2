"""``neonlite generate CKPT.h5``: sample text from a trained character language model."""
import sys

from ..backends import available_backends, gen_backend
from ..generation import GenerationError, generate_stream
from ..model import Model
from ..data.text import Vocabulary, read_text
from ..text import Tokenizer
from .arguments import non_negative_float, non_negative_int, positive_int
from .data_option import text_file

HELP = "sample text from a trained language model checkpoint"


def register(subparsers):
    """Add ``neonlite generate CKPT.h5 --prompt TEXT -n N [-b BACKEND] ...``."""
    parser = subparsers.add_parser("generate", help=HELP, description=HELP)
    parser.add_argument("checkpoint", help="checkpoint (.h5) of a character-level model")
    parser.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    parser.add_argument("-n", "--chars", type=non_negative_int, default=500,
                        help="characters to write (default 500)")
    parser.add_argument("-b", "--backend", default="cpu", choices=available_backends(),
                        help="compute backend (default cpu)")
    parser.add_argument("-t", "--temperature", type=non_negative_float, default=1.0,
                        help="divide the logits by this before sampling: below 1 more "
                             "likely characters, above 1 more varied ones; 0 always takes "
                             "the most likely (greedy) (default 1.0)")
    parser.add_argument("-k", "--top-k", type=positive_int, default=None,
                        help="sample among the k most probable characters")
    parser.add_argument("-r", "--seed", type=non_negative_int, default=None,
                        help="sampling seed (an integer >= 0)")
    parser.add_argument("--no-cache", action="store_true",
                        help="rerun the whole context for each character (slow; for checking)")
    parser.add_argument("--data", metavar="TEXT", default=None,
                        help="the text the model was trained on: its characters are the "
                             "vocabulary (for a checkpoint that does not record one)")
    parser.add_argument("--tokenizer", metavar="TOKENIZER.json", default=None,
                        help="a subword tokenizer (Hugging Face tokenizer.json, e.g. GPT-2's "
                             "BPE) for a model of subword tokens; -n then counts tokens")
    parser.set_defaults(func=command)
    return parser


def command(args):
    """``neonlite generate``: load the checkpoint on the asked-for backend and print the prompt
    followed by the sampled characters as they are sampled.  Returns the exit status (0)."""
    gen_backend(args.backend, batch_size=1, rng_seed=args.seed)
    model = Model.load(args.checkpoint)
    vocab = None if args.tokenizer is None else Tokenizer.from_file(args.tokenizer)
    if args.data is not None:
        if vocab is not None:
            raise GenerationError("generate: give --data or --tokenizer, not both")
        vocab = Vocabulary.of_text(read_text(text_file(args.data)))
    try:
        pieces = generate_stream(model, vocab, args.prompt, args.chars, args.temperature,
                                 args.top_k, args.seed, use_cache=not args.no_cache)
    except GenerationError as err:
        raise GenerationError(f"{args.checkpoint}: {err}") from None
    sys.stdout.write(args.prompt)
    sys.stdout.flush()
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0
