"""MergeBroadcast: run branches on the same input and concatenate (or sum) their outputs, the
inception block of GoogLeNet."""
from .containers import MergeSum
from .layer import ShapeError

MERGES = ("concat", "sum")


class MergeBroadcast(MergeSum):
    """Each branch (a layer or a list of layers) runs on the same input; ``merge="concat"``
    joins their outputs along the last axis (channels of NHWC images, features of vectors or
    sequences), in branch order, so every branch must give the same shape but for that axis;
    ``merge="sum"`` adds them (``MergeSum``).

    A concatenating merge copies each branch's slice of the error into a buffer of its own
    before the branch's bprop, so every layer sees a contiguous error."""

    def __init__(self, branches, merge="concat", name=None):
        if merge not in MERGES:
            raise ValueError(f"MergeBroadcast: merge must be one of {MERGES}, got {merge!r}")
        super().__init__(branches, name)
        self.merge = merge

    def _configure(self, in_shape):
        if self.merge == "sum":
            return super()._configure(in_shape)
        shapes = [b.configure(in_shape, self.prev_name) for b in self.branches]
        first = self.branches[0]
        for branch, shape in zip(self.branches[1:], shapes[1:]):
            if len(shape) != len(shapes[0]) or shape[:-1] != shapes[0][:-1]:
                raise ShapeError(
                    f"layer '{self.name}' (MergeBroadcast): cannot concatenate along the last "
                    f"axis: branch '{first.name}' gives {shapes[0]} and branch '{branch.name}' "
                    f"gives {shape}; all but the last axis must agree")
        self.widths = [s[-1] for s in shapes]
        return shapes[0][:-1] + (sum(self.widths),)

    def _max_steps(self):
        """A concatenating merge takes the length it was built for only (its branches'
        error buffers are whole); a summing one, as MergeSum."""
        return super()._max_steps() if self.merge == "sum" else None

    def allocate(self):
        super().allocate()
        if self.merge == "concat":
            n = self.be.bsz
            self.branch_errors = [self.be.zeros((n,) + b.out_shape) for b in self.branches]

    def _slices(self, t):
        start = 0
        for width in self.widths:
            yield t[..., start:start + width]
            start += width

    def fprop(self, x, inference=False):
        if self.merge == "sum":
            return super().fprop(x, inference)
        for branch, part in zip(self.branches, self._slices(self.outputs)):
            part[:] = branch.fprop(x, inference)
        return self.outputs

    def bprop(self, error):
        if self.merge == "sum":
            return super().bprop(error)
        deltas = []
        for branch, part, buf in zip(self.branches, self._slices(error), self.branch_errors):
            buf[:] = part
            deltas.append(branch.bprop(buf))
        if not self.needs_deltas:
            return None
        self.deltas[:] = deltas[0] + deltas[1]
        for d in deltas[2:]:
            self.deltas[:] = self.deltas + d
        return self.deltas
