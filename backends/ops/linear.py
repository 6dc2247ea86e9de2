"""The op table's rows of products, convolutions and pooling (``table.py`` says what a row
holds).  The backends choose their algorithms and tiles (``cpu/conv.py``, ``gpu/conv.py``,
``cpu/blas.py``, ...), so none is dispatched by the table; the GEMMs' operand check
(``check_product``, run by both backends from these rows) and cost are described here once,
their MKL / numpy BLAS and cuBLAS calls are the backends' choice."""
from ..operand_shapes import check_product
from ..reference import conv, gemm, pool
from .costs import conv_flops, gemm_flops, nbytes, size
from .table import Op, Operand

#: the operands of a product: C is updated (read where beta != 0)
_PRODUCT = (Operand("A"), Operand("B"), Operand("C", written=True, updated=True))
_CONV, _POOL = "conv_layer", "pool_layer"


def _compound_dot(A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
    K = A.shape[0] if transA else A.shape[-1]
    return gemm_flops(C.shape[-2], C.shape[-1], K), nbytes(A, B, C) + (nbytes(C) if beta else 0.0)


def _batched_dot(A, B, C, alpha=1.0, beta=0.0, transA=False, transB=False):
    K = A.shape[-2] if transA else A.shape[-1]
    batch = size(C) // (C.shape[-2] * C.shape[-1])
    return (gemm_flops(C.shape[-2], C.shape[-1], K, batch),
            nbytes(A, B, C) + (nbytes(C) if beta else 0.0))


def _fprop_conv(plan, I, F, O, bias=None, relu=False):
    return conv_flops(plan, I.shape[0]), nbytes(I, F, O, bias)


def _bprop_conv(plan, F, E, grad_I, beta=0.0):
    return conv_flops(plan, E.shape[0]), nbytes(F, E, grad_I) + (nbytes(grad_I) if beta else 0)


def _update_conv(plan, I, E, grad_F, beta=0.0):
    return conv_flops(plan, I.shape[0]), nbytes(I, E, grad_F) + (nbytes(grad_F) if beta else 0)


def _fprop_pool(plan, I, O):
    return float(size(O) * plan.R * plan.S), nbytes(I, O)


def _bprop_pool(plan, E, grad_I, beta=0.0):
    return float(size(E) * plan.R * plan.S), nbytes(E, grad_I)


F = "linear"
ROWS = (
    Op("compound_dot", F, "C = alpha * op(A) @ op(B) + beta * C", _compound_dot,
       operands=_PRODUCT, check=check_product, reference=gemm.compound_dot,
       c_symbols=("bf16/gemm_bf16:nl_gemm_bf16",),
       bf16_class="gemm"),
    Op("batched_dot", F, "C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i]", _batched_dot,
       operands=_PRODUCT, check=check_product, reference=gemm.batched_dot,
       bf16_class="gemm"),
    Op("fprop_conv", F, "O = conv(I, F) (+ bias, then ReLU)", _fprop_conv,
       operands=(Operand("plan", plan=_CONV), Operand("I"), Operand("F"),
                 Operand("O", written=True), Operand("bias", optional=True)),
       reference=conv.fprop_conv,
       c_symbols=("conv:conv_fprop_tiled", "conv:conv_bias_relu", "conv_direct:conv_direct"),
       cuda_functions=("conv_simt:nl_conv_fprop_simt*", "conv_tc:nl_conv_fprop_tc*"),
       bf16_class="conv"),
    Op("bprop_conv", F, "grad_I (+)= the data gradient of conv", _bprop_conv,
       operands=(Operand("plan", plan=_CONV), Operand("F"), Operand("E"),
                 Operand("grad_I", written=True, updated=True)),
       reference=conv.bprop_conv, c_symbols=("conv:conv_bprop_tiled", "conv:col2im"),
       cuda_functions=("conv_simt:nl_conv_bprop_simt*", "conv_tc:nl_conv_bprop_tc*"),
       bf16_class="conv"),
    Op("update_conv", F, "grad_F (+)= the filter gradient of conv", _update_conv,
       operands=(Operand("plan", plan=_CONV), Operand("I"), Operand("E"),
                 Operand("grad_F", written=True, updated=True)),
       reference=conv.update_conv,
       c_symbols=("conv:conv_update_tiled", "conv_direct:conv_direct_update"),
       cuda_functions=("conv_simt:nl_conv_update_simt*", "conv_tc:nl_conv_update_tc*"),
       bf16_class="conv"),
    Op("fprop_pool", F, "O = max or average pooling of I", _fprop_pool,
       operands=(Operand("plan", plan=_POOL), Operand("I"), Operand("O", written=True)),
       reference=pool.fprop_pool, c_symbols=("pool:maxpool_fprop", "pool:avgpool_fprop"),
       cuda_functions=("pool:nl_pool_fprop",)),
    Op("bprop_pool", F, "grad_I (+)= the gradient of pooling", _bprop_pool,
       operands=(Operand("plan", plan=_POOL), Operand("E"),
                 Operand("grad_I", written=True, updated=True)),
       reference=pool.bprop_pool, c_symbols=("pool:maxpool_bprop", "pool:avgpool_bprop"),
       cuda_functions=("pool:nl_pool_bprop",)),
)
