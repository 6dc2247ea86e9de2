"""Evaluating op-trees with generated kernels, independent of the device API.

:class:`OpTreeExecutor` is the GPU backend's ``execute``: it evaluates the inner reductions of a
tree that holds several into cached temporaries (so a tree like ``var(x)`` becomes two kernels),
plans the last kernel with :mod:`cuda_codegen`, memoizes compiled kernels by the tree's
structural key plus the plan's key, and launches.  ``execute_multi`` fuses several elementwise
assignments (an optimizer step) into one kernel.  Compiling, launching and allocating are
functions handed in, so the same code runs on pycuda and, in tests, on a host emulator.
"""
from . import codegen
from ..optree import OpNode


def _desc_key(t):
    return (tuple(t.shape), tuple(t.strides), t.storage)


def replace_node(tree, node, leaf):
    """A copy of ``tree`` with ``node`` (found by identity) replaced by ``leaf``."""
    if tree is node:
        return leaf
    if not isinstance(tree, OpNode):
        return tree
    args = tuple(replace_node(a, node, leaf) for a in tree.args)
    if all(a is b for a, b in zip(args, tree.args)):
        return tree
    return OpNode(tree.op, *args, axis=tree.axis)


class OpTreeExecutor:
    """``execute(out, tree)`` for descriptor tensors (``shape``, ``strides``, ``storage``).

    Arguments:
        compile_kernel(name, source): returns a launchable kernel (called once per key).
        launch(kernel, plan, out, leaves, scalars): runs it.
        temporary(key, shape): a float32 descriptor tensor of ``shape``, the same one each
            time for the same ``key`` (so nothing is allocated after the first call).
        max_blocks (int): cap on a launch's grid (kernels loop over the rest).
    """

    def __init__(self, compile_kernel, launch, temporary, max_blocks=65535):
        self.compile_kernel, self.launch, self.temporary = compile_kernel, launch, temporary
        self.max_blocks = max_blocks
        self.kernels = {}
        self._plans = {}
        self.compiles = 0

    def execute(self, out, tree):
        if isinstance(tree, OpNode):
            if codegen.count_reductions(tree) > 1:
                tree = self._split(out, tree)
            leaves = tree.leaves()
            tkey = tree.key(leaves)
        else:
            leaves = [] if codegen.is_scalar(tree) else [tree]
            tkey = ("scalar",) if not leaves else ("copy", str(tree.dtype))
        layout = (tkey, _desc_key(out), tuple(_desc_key(l) for l in leaves))
        cached = self._plans.get(layout)
        if cached is None:
            try:
                plan = codegen.plan(tree, out, self.max_blocks)
            except codegen.OpTreeError:
                if codegen.count_reductions(tree) != 1:
                    raise
                return self.execute(out, self._split(out, tree, keep=0))
            kkey = (tkey, plan.key)
            kernel = self.kernels.get(kkey)
            if kernel is None:
                name, source = plan.source()
                kernel = self.compile_kernel(name, source)
                self.kernels[kkey] = kernel
                self.compiles += 1
            cached = self._plans[layout] = (kernel, plan)
        kernel, plan = cached
        self.launch(kernel, plan, out, leaves, codegen.scalar_values(tree))
        return out

    def execute_multi(self, assignments):
        """``[(out, tree), ...]`` in order, in one generated kernel when the trees are
        elementwise and the outputs share a shape (see :func:`cuda_codegen.plan_multi`);
        otherwise one ``execute`` per assignment."""
        assignments = list(assignments)
        if len(assignments) < 2 or not all(isinstance(t, OpNode) and not
                                           codegen.count_reductions(t) for _, t in assignments):
            for out, tree in assignments:
                self.execute(out, tree)
            return
        operands = codegen.multi_operands(assignments)
        everything = [assignments[0][0]] + operands
        layout = ("multi", tuple(tree.key(everything) for _, tree in assignments),
                  tuple(_desc_key(d) for d in everything))
        cached = self._plans.get(layout)
        if cached is None:
            try:
                plan = codegen.plan_multi(assignments, self.max_blocks)
            except codegen.OpTreeError:
                for out, tree in assignments:
                    self.execute(out, tree)
                return
            kernel = self.kernels.get(plan.key)
            if kernel is None:
                name, source = plan.source()
                kernel = self.kernels[plan.key] = self.compile_kernel(name, source)
                self.compiles += 1
            cached = self._plans[layout] = (kernel, plan)
        kernel, plan = cached
        scalars = [v for _, tree in assignments for v in codegen.scalar_values(tree)]
        self.launch(kernel, plan, assignments[0][0], operands, scalars)

    def _split(self, out, tree, keep=1):
        """Evaluate inner reductions into temporaries until ``keep`` remain."""
        base = (tree.key(), _desc_key(out))
        step = 0
        while codegen.count_reductions(tree) > keep:
            node = codegen.innermost_reduction(tree)
            shape = codegen.tree_shape(node)
            temp = self.temporary(("split", base, step, shape), shape)
            self.execute(temp, node)
            tree = replace_node(tree, node, temp)
            step += 1
        return tree
