"""``neonlite describe --memory``: the memory table of a network for a batch size, without
training (see :mod:`.memory` for what each column counts)."""
from .memory import KINDS, backend_workspace_bytes, model_memory


def run_once(model):
    """One fprop and bprop of a batch of zeros (token id 0 for an embedding), no update: the
    backends make some work buffers on first use, and this makes them exist to be counted.
    The gradients it leaves are zeroed."""
    be = model.be
    x = be.zeros((be.bsz,) + tuple(model.in_shape))
    y = model.fprop(x)
    model.bprop(be.zeros(y.shape))
    model.zero_grads()


def format_memory(model, optimizer=None):
    """One row per layer (nested layers indented): MiB of each kind, then the totals."""
    rows = model_memory(model, optimizer)
    width = max([len("  " * depth + str(layer.name)) for layer, depth, _ in rows] + [12]) + 2
    head = f"{'layer':<{width}}{'type':<20}" + "".join(f"{kind:>13}" for kind in KINDS) + \
        f"{'total':>13}"
    lines = [head, "-" * len(head)]
    for layer, depth, mem in rows:
        name = "  " * depth + str(layer.name)
        lines.append(f"{name:<{width}}{type(layer).__name__[:19]:<20}"
                     + "".join(f"{mem[kind] / 2 ** 20:13.3f}" for kind in KINDS)
                     + f"{sum(mem.values()) / 2 ** 20:13.3f}")
    totals = {kind: sum(mem[kind] for _, depth, mem in rows if depth == 0) for kind in KINDS}
    lines.append("-" * len(head))
    lines.append(f"{'total MiB':<{width + 20}}" + "".join(f"{totals[k] / 2 ** 20:13.3f}"
                                                        for k in KINDS)
                 + f"{sum(totals.values()) / 2 ** 20:13.3f}")
    lines.append(f"backend workspaces shared by the layers: "
                 f"{backend_workspace_bytes(model.be) / 2 ** 20:.3f} MiB")
    return "\n".join(lines)
