"""Optimizers written with op-trees, and learning-rate schedules."""
from .adadelta import Adadelta
from .adam import Adam, AdamW
from .adaptive import Adagrad, RMSProp
from .multi import MultiOptimizer, scale_learning_rates
from .optimizer import Optimizer
from .schedules import CosineSchedule, PowerSchedule, Schedule, StepSchedule
from .sgd import GradientDescentMomentum

__all__ = ["Optimizer", "GradientDescentMomentum", "Adam", "AdamW", "RMSProp", "Adagrad",
           "Adadelta",
           "MultiOptimizer", "scale_learning_rates", "Schedule", "StepSchedule", "PowerSchedule", "CosineSchedule"]
