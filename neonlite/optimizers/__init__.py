"""Optimizers written with op-trees, and learning-rate schedules."""
from .adadelta import Adadelta
from .adam import Adam, AdamW
from .adaptive import Adagrad, RMSProp
from .multi import MultiOptimizer
from .optimizer import Optimizer
from .schedules import CosineSchedule, PowerSchedule, Schedule, StepSchedule
from .sgd import GradientDescentMomentum

__all__ = ["Optimizer", "GradientDescentMomentum", "Adam", "AdamW", "RMSProp", "Adagrad",
           "Adadelta",
           "MultiOptimizer", "Schedule", "StepSchedule", "PowerSchedule", "CosineSchedule"]
