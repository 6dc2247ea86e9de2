"""Graph-free layers: configure -> allocate -> fprop / bprop (see ``layer.py``)."""
from .activation import Activation, Dropout
from .attention import MultiHeadAttention
from .blocksparse_attention import BlockSparseAttention
from .blocksparse_linear import BlockSparseAffine, BlockSparseLinear
from .containers import Affine, CompoundLayer, Conv, MergeSum, Sequential, SkipNode
from .conv import Convolution
from .cost import GeneralizedCost
from .deconv import Deconv, Deconvolution
from .embedding import Embedding, PositionalEmbedding
from .layer import Layer, Parameter, ParameterLayer, ShapeError
from .layernorm import LayerNorm, RMSNorm
from .linear import Bias, Linear
from .lrn import LRN
from .merge import MergeBroadcast
from .batchnorm import BatchNorm
from .pooling import Pooling
from .recurrent import GRU, LSTM, Recurrent
from .segment_embedding import SegmentEmbedding
from .sentence import FirstToken, L2Normalize, MeanPool
from .tied_linear import TiedLinear
from .recurrent_stack import (BiGRU, BiLSTM, BiRNN, DeepBiLSTM, DeepBiRNN, RecurrentLast,
                              RecurrentMean, RecurrentSum)
from .shape import Flatten, Reshape
from .transformer import TransformerBlock

__all__ = ["Layer", "ParameterLayer", "Parameter", "ShapeError", "Linear", "Bias", "Affine",
           "Convolution", "Conv", "Pooling", "BatchNorm", "Activation", "Dropout", "Flatten",
           "Reshape", "Sequential", "MergeSum", "SkipNode", "CompoundLayer", "GeneralizedCost",
           "Embedding", "PositionalEmbedding", "LayerNorm", "RMSNorm", "MultiHeadAttention",
           "TransformerBlock", "BlockSparseLinear", "BlockSparseAffine", "BlockSparseAttention",
           "Recurrent", "LSTM", "GRU", "RecurrentLast", "RecurrentSum", "RecurrentMean", "BiRNN",
           "BiLSTM", "BiGRU", "DeepBiRNN", "DeepBiLSTM", "Deconvolution", "Deconv",
           "MergeBroadcast", "LRN", "SegmentEmbedding", "TiedLinear", "MeanPool",
           "L2Normalize", "FirstToken"]
