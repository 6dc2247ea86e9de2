"""``neonlite kernels``: build ahead of time, list, and clean the compiled kernels.

    neonlite kernels build [--target cpu|cuda] [--arch sm_80,sm_90] [-j N]
    neonlite kernels list  [--target cpu|cuda] [--arch sm_80,sm_90]
    neonlite kernels clean

``neonlite.cli`` adds the subcommand with :func:`register`.  Commands return the exit status:
0, or 1 when a build failed or no compiler was found (the compiler's log goes to stderr).
"""
import argparse
import os
import re
import sys

from ..kernels import specs
from ..kernels.build import default_builder
from ..kernels.cache import folder_problem
from ..kernels.toolchain import CompileError


def _archs(text):
    archs = tuple(a.strip() for a in text.split(",") if a.strip())
    bad = [a for a in archs if not re.fullmatch(r"sm_\d+[a-z]?", a)]
    if bad or not archs:
        raise argparse.ArgumentTypeError(f"expected CUDA archs like 'sm_80,sm_90', got {text!r}")
    return archs


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of jobs, got {text!r}")
    return value


def register(subparsers):
    """Add the ``kernels`` subcommand (with ``build``, ``list``, ``clean``) to ``subparsers``."""
    parser = subparsers.add_parser("kernels", help="build, list and clean the compiled kernels",
                                   description="Build ahead of time, list, and clean the "
                                   "compiled kernels (C for the CPU backend, CUDA for the GPU).")
    commands = parser.add_subparsers(dest="kernels_command", metavar="ACTION", required=True)
    build = commands.add_parser("build", help="compile every kernel variant into the cache now")
    listing = commands.add_parser("list", help="each kernel variant and whether it is cached")
    for sub in (build, listing):
        sub.add_argument("--target", choices=specs.TARGETS, default=None,
                         help="only this target's variants (build: default cpu; list: all)")
        sub.add_argument("--arch", type=_archs, default=specs.DEFAULT_CUDA_ARCHS,
                         help=f"comma-separated CUDA archs (default: "
                              f"{','.join(specs.DEFAULT_CUDA_ARCHS)})")
    build.add_argument("-j", "--jobs", type=_positive, default=os.cpu_count() or 1,
                       help="compilers to run at once (default: the number of CPUs)")
    commands.add_parser("clean", help="delete every cached kernel")
    parser.set_defaults(func=run)
    return parser


def run(args, out=None, err=None):
    """Run the parsed ``kernels`` command (printing to ``out``/``err``, default stdout and
    stderr); returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    builder = default_builder()
    if builder.cache.root.exists() and not builder.cache.root.is_dir():
        print(f"neonlite: error: the kernel cache {builder.cache.root} is a file, not a folder: "
              f"set NEONLITE_CACHE_DIR to a folder ('neonlite doctor' checks the cache)", file=err)
        return 1
    unsafe = folder_problem(builder.cache.root)
    if unsafe and args.kernels_command != "clean":
        print(f"neonlite: error: {unsafe}", file=err)
        return 1
    if args.kernels_command == "clean":
        removed = builder.cache.clean()
        print(f"removed {removed} cached kernel file(s) from {builder.cache.root}", file=out)
        return 0
    if args.kernels_command == "build":
        return _build(builder, args.target or "cpu", args.arch, args.jobs, out, err)
    return _list(builder, args.target, args.arch, out)


def _build(builder, target, archs, jobs, out, err):
    chosen = specs.variants(target)
    if not chosen:
        print(f"no {target} kernel variants in the table", file=out)
        return 0
    failed = 0
    for result in builder.build_all(target, archs, jobs, chosen):
        where = f"{result.spec.name}" + (f" [{result.arch}]" if result.arch else "")
        if result.status != "failed":
            print(f"{result.status:>6}  {where}", file=out)
            continue
        failed += 1
        print(f"FAILED  {where}: {str(result.error).splitlines()[0]}", file=out)
        if isinstance(result.error, CompileError):
            print(str(result.error), file=err)
    print(f"cache: {builder.cache.root}", file=out)
    if failed:
        print(f"{failed} kernel variant(s) failed to build", file=err)
    return 1 if failed else 0


def _ptxas_lines(meta):
    for function, info in sorted(meta.get("ptxas", {}).items()):
        yield (f"        {function}: {info['registers']} registers, {info['shared']} B shared, "
               f"spills {info['spill_stores']} B stored / {info['spill_loads']} B loaded")


_LIST_HEADER = ("variant", "target", "source", "defines", "state")


def _list(builder, target, archs, out):
    """The table of variants: a header row, then one row per variant (and CUDA arch), the
    columns as wide as their widest cell; cached CUDA variants get their ptxas lines."""
    print(f"cache: {builder.cache.root}", file=out)
    rows = []
    for spec in specs.variants(target):
        defines = " ".join(f"{k}={v}" for k, v in spec.defines) or "-"
        for arch in ((None,) if spec.target == "cpu" else archs):
            cached, detail = builder.status(spec, arch)
            where = spec.target + (f" {arch}" if arch else "")
            state = "cached" if cached else f"not cached ({detail})"
            extra = list(_ptxas_lines(detail)) if cached and spec.target == "cuda" else []
            rows.append(((spec.name, where, spec.source, defines, state), extra))
    widths = [max([len(h)] + [len(r[0][i]) for r in rows]) for i, h in enumerate(_LIST_HEADER)]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells[:-1], widths)) + "  " + cells[-1]
    print(line(_LIST_HEADER), file=out)
    for cells, extra in rows:
        print(line(cells), file=out)
        for text in extra:
            print(text, file=out)
    return 0
