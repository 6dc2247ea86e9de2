"""The error of a backend that cannot run on this machine (no pycuda, no device, ...): raised by
the registry's ``gen_backend`` and by a backend's own probes, re-exported as
``neonlite.backends.BackendUnavailable``."""


class BackendUnavailable(RuntimeError):
    """The asked-for backend cannot run here; the message says why."""
