"""The tests' own layout (``tests/conftest.py`` describes it): every test file of ``tests/api/``
sits in a subject folder; no test module imports another test module: a helper two test files
share lives in ``tests/support/``, a fixture a folder's files share in that folder's
``conftest.py``; and a test names checkout files (``examples/``, ``docs/``) from
``support.harness.CHECKOUT``, not by its own depth (a ``parents[2]`` of its own path breaks when
the file moves).  An import of a test module works only while both files sit in one folder
(pytest puts each test file's folder on ``sys.path``), so moving either breaks the other."""
import ast
import re

from support.harness import CHECKOUT

TESTS = CHECKOUT / "tests"
#: test modules that import another, each with its reason; none may be added
IMPORTS_KEPT = {
    # tests/gpu_host/ is being edited on another branch; its shared kernel check moves to
    # tests/support/ after that merge
    "gpu_host/test_attention_gpu_kernels.py": "test_blocksparse_gpu_kernels",
}
#: test files that find the checkout by their own depth, each with its reason; none may be added
DEPTH_KEPT = {
    # the op table's harness is edited on another branch; CHECKOUT after that merge
    "backend/test_op_table.py",
}


def imports_of_test_modules(tests):
    """{test file relative to ``tests`` (posix): [test modules it imports]} for every test
    file that imports one."""
    found = {}
    for path in sorted(tests.rglob("test_*.py")):
        names = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.append(node.module)
            elif isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
        imported = sorted(n for n in names if n.split(".")[0].startswith("test_"))
        if imported:
            found[path.relative_to(tests).as_posix()] = imported
    return found



def test_no_test_module_imports_another():
    found = imports_of_test_modules(TESTS)
    wrong = {f: names for f, names in found.items()
             if names != [IMPORTS_KEPT.get(f)]}
    assert not wrong, f"test modules importing test modules (move the shared code to " \
                      f"tests/support/ or the folder's conftest.py): {wrong}"
    stale = sorted(f for f in IMPORTS_KEPT if f not in found)
    assert not stale, f"IMPORTS_KEPT lists files that import no test module now: {stale}"


def test_every_api_test_file_is_in_a_subject_folder():
    loose = sorted(p.name for p in (TESTS / "api").glob("*.py"))
    assert not loose, f"test files directly in tests/api/ (put each in the folder of its " \
                      f"subject, tests/conftest.py lists them): {loose}"


def files_finding_the_checkout_by_depth(tests):
    """The test files (relative to ``tests``, posix) that take a ``parents[...]`` of their own
    ``__file__``."""
    return sorted(p.relative_to(tests).as_posix() for p in tests.rglob("test_*.py")
                  if re.search(r"Path\(__file__\)(\.resolve\(\))?\.parents\[", p.read_text()))


def test_checkout_files_are_named_from_checkout():
    found = set(files_finding_the_checkout_by_depth(TESTS))
    wrong = sorted(found - DEPTH_KEPT)
    assert not wrong, f"test files naming checkout files by their own depth (use " \
                      f"support.harness.CHECKOUT): {wrong}"
    stale = sorted(DEPTH_KEPT - found)
    assert not stale, f"DEPTH_KEPT lists files that no longer do: {stale}"
