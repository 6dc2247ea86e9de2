"""How much more host memory this process may take: the least of the memory the system says
is available (``MemAvailable`` of ``/proc/meminfo``), what the address-space limit
(``RLIMIT_AS``, ``ulimit -v``) leaves above the process's current size, and what the cgroup
memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) leaves above the cgroup's
current use.  Checked before allocating, so a size a file or a setting promises is refused in
one line instead of ending in an allocation error or the kernel's out-of-memory killer.
"""
import os

GIB = float(1 << 30)


def _meminfo(key):
    return _proc_bytes("/proc/meminfo", key)


def _proc_bytes(path, key):
    """The ``key: N kB`` line of ``path`` (``/proc/meminfo``, ``/proc/self/status``) in bytes;
    None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(key.encode() + b":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _physical():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _address_space_left():
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    size = _status("VmSize")
    return max(0, soft - size) if size is not None else soft


def _status(key):
    return _proc_bytes("/proc/self/status", key)


def _read_number(path):
    try:
        with open(path, "rb") as f:
            text = f.read(64).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_left():
    """What the cgroup (v2, else v1) limit leaves above its current use; None without one."""
    try:
        with open("/proc/self/cgroup", "rb") as f:
            lines = f.read(65536).decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":
            base = "/sys/fs/cgroup" + rel.rstrip("/")
            limit, used = _read_number(base + "/memory.max"), \
                _read_number(base + "/memory.current")
        elif "memory" in controllers.split(","):
            base = "/sys/fs/cgroup/memory" + rel.rstrip("/")
            limit, used = _read_number(base + "/memory.limit_in_bytes"), \
                _read_number(base + "/memory.usage_in_bytes")
        else:
            continue
        if limit is not None and limit < (1 << 60):
            return max(0, limit - (used or 0))
    return None


def available_bytes():
    """The bytes this process can still allocate (see the module docstring); None where
    nothing can be known."""
    found = [v for v in (_meminfo("MemAvailable") or _physical(), _address_space_left(),
                         _cgroup_left()) if v is not None]
    return min(found) if found else None


def describe_bytes(n):
    """``n`` bytes in words: GiB above 1 GiB, else MiB."""
    return f"{n / GIB:,.1f} GiB" if n >= GIB else f"{n / (1 << 20):,.1f} MiB"
