"""Benchmark workloads.  Each module defines NAME, FIGURE (the unit reported), and
``neonlite(be, smoke) -> (step, work)`` / ``torch(device, smoke) -> (step, work)``, where one
``step()`` call does ``work`` units (images, tokens, FLOPs...) of the figure; optionally
``extra_contenders(be, smoke)`` / ``torch_contenders(device, smoke)`` (more ``name -> step``
timed alongside, the PyTorch ones only where PyTorch runs), ``unavailable(smoke)`` and
``note(row)``."""
from . import (attention, blocksparse_attention, blocksparse_linear, bn_relu_nhwc, bn_relu_pool,
               char_transformer, conv3x3, deconv, gemm, gpu_adam, gpu_conv, gpu_gemm, gpu_norm,
               gpu_resnet20, lenet)
from . import (adamw_step, bf16_training, gemm_bf16, minilm_encode, nanogpt, recurrent_train,
               rmsnorm, varlen_encode)

WORKLOADS = {m.NAME: m for m in (lenet, conv3x3, bn_relu_pool, bn_relu_nhwc, gemm,
                                 *gemm_bf16.WORKLOADS,
                                 char_transformer, *blocksparse_linear.WORKLOADS,
                                 blocksparse_attention,
                                 *attention.WORKLOADS, recurrent_train.LSTM_TRAIN,
                                 *recurrent_train.SMALL, deconv, nanogpt, lenet.B32, adamw_step,
                                 minilm_encode, rmsnorm, varlen_encode,
                                 *bf16_training.WORKLOADS)}
#: workloads that run only with ``--backend gpu`` (added to WORKLOADS there)
GPU_WORKLOADS = {m.NAME: m for m in (gpu_gemm.BF16, gpu_gemm.F32, gpu_adam, *gpu_conv.ALL,
                                     gpu_norm.BN_RELU, gpu_norm.SOFTMAX_CE, gpu_resnet20,
                                     *blocksparse_linear.GPU_WORKLOADS)}
