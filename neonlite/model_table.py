"""``Model.describe()``'s table: one row per layer (nested layers indented), then the total."""
from .layers.containers import CompoundLayer, MergeSum, Sequential


def describe_table(layers, parameters, max_steps=None):
    """The table of ``layers`` (configured): layer, type, output shape, parameter count; and
    the total of ``parameters``; for a model of sequences (``max_steps`` T), a last line
    saying it takes any length up to T."""
    rows = []
    _describe_rows(layers, 0, rows)
    width = max(len(r[0]) for r in rows) + 2
    kinds = max(14, max(len(r[1]) for r in rows) + 2)
    lines = [f"{'layer':<{width}}{'type':<{kinds}}{'output shape':<20}{'params':>12}"]
    lines.append("-" * len(lines[0]))
    for name, kind, shape, count in rows:
        lines.append(f"{name:<{width}}{kind:<{kinds}}{str(shape):<20}{count:>12,}")
    total = sum(p.value.size for p in parameters)
    lines.append("-" * len(lines[0]))
    lines.append(f"{'total':<{width + kinds + 20}}{total:>12,}")
    if max_steps is not None:
        lines.append(f"input: sequences of any length up to {max_steps} steps (each batch "
                     f"runs at its own length; the shapes above are for {max_steps})")
    return "\n".join(lines)


def _describe_rows(layers, depth, rows):
    for layer in layers:
        rows.append(("  " * depth + str(layer.name), type(layer).__name__,
                     layer.out_shape, layer.param_count()))
        if isinstance(layer, MergeSum):
            for branch in layer.branches:
                _describe_rows(branch.layers, depth + 1, rows)
        elif isinstance(layer, Sequential) and not isinstance(layer, CompoundLayer):
            _describe_rows(layer.layers, depth + 1, rows)
