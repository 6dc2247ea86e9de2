"""No module of ``backends/`` reads another object's private attributes: an attribute ``_x``
(not a dunder) is read only through ``self`` or ``cls``.  A plan, tensor or kernel table that
another module needs to read says so with a public name.

One exemption, by package: :class:`~neonlite.backends.cpu.tensor.CPUTensor`'s ``_ary`` (its
numpy array) is read by the CPU backend's own modules (``backends/cpu/``), on every call of
every op, where a property would cost a function call per operand."""
import ast
from pathlib import Path

from neonlite.kernels import specs

BACKENDS = specs.KERNEL_ROOT.parent / "backends"
#: (folder under backends/, attribute) pairs a module of that folder may read
PACKAGE_PRIVATE = {("cpu", "_ary")}


def private_reads(root):
    """'path:line: expr._name' for every read of a private attribute not through self/cls in
    the modules under ``root`` (the exemptions of :data:`PACKAGE_PRIVATE` aside)."""
    found = []
    for path in sorted(Path(root).rglob("*.py")):
        folder = path.relative_to(root).parts[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if (folder, node.attr) in PACKAGE_PRIVATE:
                continue
            found.append(f"{path.relative_to(root)}:{node.lineno}: "
                         f"{ast.unparse(node.value)}.{node.attr}")
    return found


def test_no_backend_module_reads_private_attributes_of_another():
    assert private_reads(BACKENDS) == []


def test_the_scan_finds_a_private_read(tmp_path):
    """The scan itself: a read through another object is found, one through self is not."""
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "plan.py").write_text(
        "def render(p):\n    return p._roots\n\n\nclass A:\n    def f(self):\n"
        "        return self._x, other._ary\n")
    assert private_reads(tmp_path) == ["gpu/plan.py:2: p._roots", "gpu/plan.py:7: other._ary"]
