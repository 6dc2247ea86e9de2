"""The allowed range of every option of every optimizer and schedule, checked when the object
is made, so a YAML run (through :func:`neonlite.config.build.build`) and a Python script meet
the same check, before anything trains.

Each class lists its options in ``OPTIONS`` (``{option: Range}``); :func:`option_table`
merges the tables up the class's bases, and :func:`check_options` checks the values a
constructor was given against it.  A value out of range raises :class:`OptionError` (a
:class:`~neonlite.config.ConfigError`) with one line naming the class, the option, the value
and the range: ``Adam: epsilon must be a finite number > 0, got -1e-08``; a YAML run prefixes
the key path (``optimizer.config.epsilon: ...``).

The ranges, and why (each one refuses a setting that trains backwards, not at all, or not as
asked):

==========================  ===============================  ==================================
option                      range                            refused because
==========================  ===============================  ==================================
learning_rate               finite, > 0                      0 trains nothing, < 0 ascends
gradient_clip_norm          None or finite, > 0              < 0 ascends, 0 stops, NaN ignored
gradient_clip_value         None or finite, > 0              0 stops learning
momentum_coef, beta_1,      [0, 1)                           1 never forgets, > 1 diverges
beta_2, decay_rate, decay
epsilon                     finite, > 0                      <= 0 divides by zero or flips sign
wdecay, weight_decay        finite, >= 0                     < 0 grows the weights
StepSchedule change         finite, > 0                      <= 0 flips or zeroes the rate
PowerSchedule gamma, power  finite, >= 0                     < 0 grows the rate without end
CosineSchedule min_ratio    [0, 1]                           outside, a rate < 0 or > the base
total_steps / warmup_steps  integers >= 1 / >= 0, warmup <   nothing to decay over
MixedPrecision scales       finite, > 0; growth > 1,         a scale that never recovers
                            0 < backoff < 1
==========================  ===============================  ==================================

plus the options that are not numbers: ``schedule`` (an object with ``rate``), ``name`` (text),
``nesterov`` (true or false, and only with ``momentum_coef`` > 0), ``state_dtype`` and
``decay_exclude`` (their listed words).
``tests/api/optimizers/test_optimizer_options.py`` checks that every constructor option of every
optimizer and schedule has a row here.

Counters (an optimizer's ``step``, a model's epoch and step index) a run goes on from are at
most :data:`MAX_COUNT` (2**62), checked when a checkpoint is resumed and before ``fit``
trains: 2**62 more steps before the int64 a checkpoint stores them in would overflow, so
every save of a run can write its counters back.
"""
import math
import numbers

from ..config.errors import ConfigError, short_repr

MAX_COUNT = 2 ** 62


class OptionError(ConfigError):
    """An option value out of its range; ``option`` is the option's name (or its key path
    below the object, ``optimizer_mapping.fc9``)."""

    def __init__(self, message, option):
        super().__init__(message)
        self.option = option


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class Range:
    """A number in [low, high] (``open_low`` / ``open_high``: the end left out), finite;
    ``optional``: None allowed too; ``integer``: whole numbers only."""

    def __init__(self, low=None, high=None, open_low=False, open_high=False, optional=False,
                 integer=False):
        self.low, self.high, self.open_low, self.open_high = low, high, open_low, open_high
        self.optional, self.integer = optional, integer

    def describe(self):
        kind = "an integer" if self.integer else "a finite number"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
            text = f"{kind} in {left}{self.low}, {self.high}{right}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.open_low else '>='} {self.low}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.open_high else '<='} {self.high}"
        else:
            text = kind
        return text + (" (or null)" if self.optional else "")

    def accepts(self, value):
        if value is None:
            return self.optional
        if not (_is_integer(value) if self.integer else _is_number(value)):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return self.high is None or (value < self.high if self.open_high else value <= self.high)

    def normal(self, value):
        if value is None:
            return None
        return int(value) if self.integer else float(value)


class Choice:
    """One of ``words`` (compared with ``==``)."""

    def __init__(self, *words):
        self.words = words

    def describe(self):
        return "one of " + ", ".join(short_repr(w) for w in self.words)

    def accepts(self, value):
        return any(value == w and type(value) is type(w) for w in self.words)

    def normal(self, value):
        return value


class Flag(Choice):
    """True or false."""

    def __init__(self):
        super().__init__(True, False)

    def describe(self):
        return "true or false"


class Text(Choice):
    """A string (or None: the default)."""

    def describe(self):
        return "a string (or null)"

    def accepts(self, value):
        return value is None or isinstance(value, str)


class HasRate(Choice):
    """A schedule: an object with a ``rate(base_lr, epoch, step)`` method (or None)."""

    def describe(self):
        return "a schedule (StepSchedule, PowerSchedule, CosineSchedule, ...) or null"

    def accepts(self, value):
        return value is None or callable(getattr(value, "rate", None))


class Words(Choice):
    """A list of ``words`` (or one of them alone)."""

    def describe(self):
        return "a list of " + ", ".join(short_repr(w) for w in self.words)

    def accepts(self, value):
        items = [value] if isinstance(value, str) else value
        return isinstance(items, (list, tuple)) and all(isinstance(i, str) and i in self.words
                                                        for i in items)

    def normal(self, value):
        return (value,) if isinstance(value, str) else tuple(value)


POSITIVE = Range(0, open_low=True)
NON_NEGATIVE = Range(0)
UNIT_OPEN = Range(0, 1, open_high=True)
POSITIVE_OR_NONE = Range(0, open_low=True, optional=True)


def option_table(cls):
    """``{option: Range or Choice}`` of ``cls`` and its bases (a subclass's entry wins)."""
    table = {}
    for klass in reversed(cls.__mro__):
        table.update(vars(klass).get("OPTIONS", {}))
    return table


def option_error(owner, option, value, expected):
    """The :class:`OptionError` of ``value`` given for ``option`` of ``owner`` (an object or
    a class name)."""
    name = owner if isinstance(owner, str) else type(owner).__name__
    return OptionError(f"{name}: {option} must be {expected}, got {short_repr(value)}", option)


def check_options(owner, **values):
    """``values`` checked against ``type(owner)``'s :func:`option_table`, each made plain
    (floats, ints, tuples); raises :class:`OptionError` for the first out of range."""
    table = option_table(type(owner))
    checked = {}
    for option, value in values.items():
        spec = table[option]
        if not spec.accepts(value):
            raise option_error(owner, option, value, spec.describe())
        checked[option] = spec.normal(value)
    return checked


def check_count(owner, option, value):
    """``value`` as an int if it is a counter in [0, :data:`MAX_COUNT`]; OptionError
    otherwise (a loaded optimizer step, for example)."""
    spec = Range(0, MAX_COUNT, integer=True)
    if not spec.accepts(value):
        raise option_error(owner, option, value, spec.describe())
    return int(value)
