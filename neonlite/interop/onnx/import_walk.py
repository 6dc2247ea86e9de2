"""The walk that turns an ONNX graph (a DAG) into neonlite's nested layers: a chain of
single-input nodes becomes a sequence of layers, and a tensor used by several nodes opens
branches that must meet again at one node, the join (``Add`` / ``Sum``: ``MergeSum``;
``Concat``: ``MergeBroadcast``), each branch a sequence of its own (an empty one, the
tensor itself, is a ``SkipNode``).  This is how a ResNet's residual blocks and an Inception
block's branches are written in neonlite (``layers/merge.py``, ``examples/cifar10_resnet.py``).

Only *data* edges count: every input of a join, the first input of any other node (the rest,
weights and shapes, must be constants: the converters check that).  The join of a fork at
tensor t is the first node, in dependency order, after which every path from t has met: the
immediate post-dominator of t.  A graph whose branches cross (a node taking one tensor from
inside a fork and one from before it) is refused, naming the node.
"""
from .errors import OnnxImportError
from .onnx_file import node_label

JOINS = ("Add", "Sum", "Concat")
#: the deepest nesting of branches read (each level is a MergeSum / MergeBroadcast inside a
#: branch of the one outside it)
MAX_DEPTH = 100


class GraphWalk:
    """Walks a checked :class:`~.onnx_file.OnnxGraph`; ``convert(node, value)`` returns
    ``(layers, value)`` for a single-input node, ``join(node, branches)`` the merge layer and
    value of a join whose ``branches`` are ``(layers, value)`` pairs in the join's input
    order."""

    def __init__(self, graph, convert, join):
        self.graph, self.convert, self.join = graph, convert, join
        self.rank = {id(node): i for i, node in enumerate(graph.nodes)}
        self.users = {}
        for node in graph.nodes:
            for name in dict.fromkeys(self.data_inputs(node)):
                self.users.setdefault(name, []).append(node)

    def data_inputs(self, node):
        """The inputs of ``node`` that carry data from the graph input (see the module)."""
        if node.op_type in JOINS:
            return [i for i in node.input if i and i not in self.graph.constants]
        first = node.input[0] if node.input else ""
        return [first] if first and first not in self.graph.constants else []

    def ancestors(self, name):
        """The ids of the nodes ``name`` is computed from, through data edges."""
        seen, todo = set(), [name]
        while todo:
            node = self.graph.producer.get(todo.pop())
            if node is not None and id(node) not in seen:
                seen.add(id(node))
                todo.extend(self.data_inputs(node))
        return seen

    def sequence(self, start, value, stop, depth=0):
        """``(layers, value)`` computing tensor ``stop`` from tensor ``start`` (of ``value``),
        inside ``depth`` levels of branches."""
        if depth > MAX_DEPTH:
            raise OnnxImportError(f"{self.graph.path}: branches nest more than {MAX_DEPTH} "
                                  f"deep (at tensor {start!r}); import reads at most "
                                  f"{MAX_DEPTH} levels")
        region = self.ancestors(stop)
        layers, t = [], start
        while t != stop:
            users = [n for n in self.users.get(t, ()) if id(n) in region]
            if not users:
                node = self.graph.producer.get(stop)
                raise OnnxImportError(f"{self.graph.path}: {node_label(node)} computes from "
                                      f"constants only, not from the graph input; neonlite "
                                      f"layers compute from their input")
            if len(users) == 1 and len(self.data_inputs(users[0])) == 1:
                node = users[0]
                new, value = self.convert(node, value)
            else:
                node = self._join_of(t, region)
                branches = [self.sequence(t, value, name, depth + 1)
                            for name in self.data_inputs(node)]
                new, value = self.join(node, branches)
            layers.extend(new)
            t = node.output[0]
        return layers, value

    def _join_of(self, start, region):
        """The node where every data path from ``start`` inside ``region`` meets (see the
        module's docstring)."""
        pending = {start: self._edges(start, region)}
        producer = self.graph.producer.get(start)
        first = 0 if producer is None else self.rank[id(producer)] + 1
        for node in self.graph.nodes[first:]:
            if id(node) not in region:
                continue
            ins = self.data_inputs(node)
            reached = [i for i in ins if i in pending]
            if not reached:
                continue
            if len(reached) != len(ins):
                raise OnnxImportError(
                    f"{self.graph.path}: {node_label(node)} joins tensor {reached[0]!r} with "
                    f"{next(i for i in ins if i not in pending)!r}, which is computed before "
                    f"the branches began at {start!r}; neonlite's merge layers join branches "
                    f"of one input")
            for name in ins:
                pending[name] -= 1
                if pending[name] == 0:
                    del pending[name]
            out = node.output[0]
            pending[out] = self._edges(out, region) or 1
            if list(pending) == [out]:
                return node  # (a join: only Add, Sum and Concat have several data inputs)
        raise OnnxImportError(f"{self.graph.path}: the branches from tensor {start!r} never "
                              f"meet again")

    def _edges(self, name, region):
        return sum(self.data_inputs(user).count(name) for user in self.users.get(name, ())
                   if id(user) in region)
