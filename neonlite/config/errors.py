"""The error type of bad configuration."""
import difflib


class ConfigError(ValueError):
    """A configuration entry that cannot be used; the message starts with its key path
    (``layers[3].config.nout: ...``) and says what was expected."""


def did_you_mean(word, choices):
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to ``word`` (case-insensitive
    first), else ``"; expected one of a, b, c"``."""
    choices = sorted(set(choices))
    for choice in choices:
        if choice.lower() == str(word).lower():
            return f"; did you mean '{choice}'?"
    close = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    if close:
        return f"; did you mean '{close[0]}'?"
    return f"; expected one of {', '.join(choices)}" if choices else ""


def closest(word, choices, cutoff=0.75):
    """The choice close enough to ``word`` to be a misspelling of it, else None."""
    lowered = {c.lower(): c for c in choices}
    if str(word).lower() in lowered:
        return lowered[str(word).lower()]
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=cutoff)
    return close[0] if close else None


def short_repr(value, limit=60):
    """``repr(value)`` cut to about ``limit`` characters (``...`` marks a cut), for messages:
    a message never prints a whole large value."""
    if isinstance(value, (list, tuple, dict)) and len(value) > 20:
        text = repr(type(value)(list(value)[:20]) if not isinstance(value, dict)
                    else dict(list(value.items())[:20]))
    else:
        try:
            text = repr(value)
        except (ValueError, RecursionError):
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."
