"""Activations, costs and metrics."""
from .activation import Gelu, Identity, Logistic, Rectlin, Softmax, Tanh, Transform
from .cost import (Cost, CrossEntropyBinary, CrossEntropyMulti, MeanSquared, SmoothL1Loss,
                   SumSquared)
from .lm_metrics import BitsPerCharacter, NatsPerToken, Perplexity
from .metric import (Accuracy, LogLoss, MeanSquaredError, Metric, Misclassification,
                     TopKMisclassification)

__all__ = ["Transform", "Identity", "Rectlin", "Logistic", "Tanh", "Softmax", "Gelu", "Cost",
           "CrossEntropyMulti", "CrossEntropyBinary", "SumSquared", "MeanSquared",
           "SmoothL1Loss", "Metric",
           "Misclassification", "Accuracy", "TopKMisclassification", "LogLoss", "NatsPerToken",
           "BitsPerCharacter", "Perplexity", "MeanSquaredError"]
