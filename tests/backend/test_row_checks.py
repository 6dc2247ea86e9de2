"""The operand checks of the op table's rows are the ones the backends run: for the ops whose
backends choose their own algorithms (GEMM, fused attention, block-sparse products), the CPU
backend and the GPU backend (over the host emulator) call the row's ``check`` before any
kernel, so a check written in the row is the one description of the op's operands (before
the table, each backend section file called its own copy)."""
import numpy as np
import pytest
from support.gpu_host_backend import host_gpu_backend
from support.requires import requires

import neonlite
from neonlite.backends.ops import OPS
from neonlite.blocksparse.layouts import as_layout


def _calls(be, given_plan=None):
    """{op name: a call of the op on small valid operands of ``be``} (the block-sparse ops
    given ``given_plan`` in place of their plan, when not None)."""
    rng = np.random.default_rng(0)
    arr = lambda *shape: be.array(rng.normal(size=shape))  # noqa: E731
    q, k, v, out, lse = arr(2, 8, 4), arr(2, 8, 4), arr(2, 8, 4), arr(2, 8, 4), arr(2, 8)
    made = be.blocksparse_layer(as_layout(np.tril(np.ones((1, 2, 2), np.uint8))), 8)
    nnz, plan = made.nnz, made if given_plan is None else given_plan
    w, blocks = arr(nnz, 8, 8), arr(1, nnz, 8, 8)
    heads = lambda: arr(1, 1, 16, 4)  # noqa: E731
    return {
        "compound_dot": lambda: be.compound_dot(arr(3, 4), arr(4, 5), arr(3, 5)),
        "batched_dot": lambda: be.batched_dot(arr(2, 3, 4), arr(2, 4, 5), arr(2, 3, 5)),
        "attention": lambda: be.attention(q, k, v, out, lse, 0.5, True),
        "attention_bprop": lambda: be.attention_bprop(q, k, v, out, lse, arr(2, 8, 4),
                                                      arr(2, 8, 4), arr(2, 8, 4),
                                                      arr(2, 8, 4), 0.5, True),
        "blocksparse_fprop": lambda: be.blocksparse_fprop(plan, arr(3, 16), w, arr(3, 16)),
        "blocksparse_bprop": lambda: be.blocksparse_bprop(plan, arr(3, 16), w, arr(3, 16)),
        "blocksparse_update": lambda: be.blocksparse_update(plan, arr(3, 16), arr(3, 16),
                                                            arr(nnz, 8, 8)),
        "blocksparse_sdd": lambda: be.blocksparse_sdd(plan, heads(), heads(), blocks),
        "blocksparse_dsd": lambda: be.blocksparse_dsd(plan, blocks, heads(), heads()),
        "blocksparse_softmax": lambda: be.blocksparse_softmax(plan, blocks, arr(1, nnz,
                                                                                8, 8)),
        "blocksparse_softmax_bprop": lambda: be.blocksparse_softmax_bprop(
            plan, blocks, arr(1, nnz, 8, 8), arr(1, nnz, 8, 8)),
    }


NAMES = ["compound_dot", "batched_dot", "attention", "attention_bprop", "blocksparse_fprop",
         "blocksparse_bprop", "blocksparse_update", "blocksparse_sdd", "blocksparse_dsd",
         "blocksparse_softmax", "blocksparse_softmax_bprop"]


class _Refused(Exception):
    pass


def _row_check_runs(be, name):
    """The row's check, replaced by one that runs it (the operands pass) and then refuses
    the call: the op must raise that refusal (so its own code went through the row's check)
    having given the check its name first.  The rows are frozen: the check is put back with
    ``object.__setattr__`` as it was replaced."""
    row = OPS[name]
    check = row.check
    assert check is not None, f"{name}: the row has no check"
    seen = []

    def refuse(op, *args, **kwargs):
        check(op, *args, **kwargs)
        seen.append(op)
        raise _Refused(op)
    call = _calls(be)[name]
    object.__setattr__(row, "check", refuse)
    try:
        with pytest.raises(_Refused):
            call()
    finally:
        object.__setattr__(row, "check", check)
    assert seen == [name]


@pytest.mark.parametrize("name", NAMES)
def test_cpu_backend_runs_the_rows_check(name):
    _row_check_runs(neonlite.gen_backend("cpu", batch_size=4, rng_seed=0), name)


@requires("emulator")
@pytest.mark.parametrize("name", NAMES)
def test_gpu_backend_runs_the_rows_check(monkeypatch, name):
    _row_check_runs(host_gpu_backend(monkeypatch), name)

@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("blocksparse")])
def test_a_block_sparse_op_needs_a_plan(name):
    """Anything but a block-sparse plan where the plan goes is one TypeError naming the op
    and what it got, from the row's check (it was an AttributeError on ``plan.bs``)."""
    be = neonlite.gen_backend("cpu", batch_size=4, rng_seed=0)
    with pytest.raises(TypeError, match=f"^{name}: plan must be a block-sparse plan "
                                        f"\\(of blocksparse_layer\\), got dict$"):
        _calls(be, {"layout": None})[name]()
    _calls(be)[name]()
