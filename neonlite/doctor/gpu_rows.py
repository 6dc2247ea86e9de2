"""The rows of ``neonlite doctor`` about the GPU side: nvcc (its version and the ``sm_`` targets
it can build), pycuda, the CUDA driver and each device.  pycuda and the driver are probed in a
child process (:mod:`.gpu_probe`) under a time limit, so a hanging or crashing driver is a row.

:func:`gpu_rows` returns the rows and the reason the GPU backend cannot run here (None: it
can).  ``needed`` (the GPU backend was asked for) turns absent pieces from ``--`` into ``FAIL``.
"""
import json
import os
import re
import subprocess
import sys

from .report import ABSENT, FAIL, OK, WARN, Row, one_line

PROBE_TIMEOUT_S = 60
GPU_INSTALL = "pip install 'neonlite[gpu]' on a machine with an NVIDIA driver and the CUDA toolkit"


def nvcc_row(needed):
    """(row, reason or None)."""
    from ..kernels.specs import DEFAULT_CUDA_ARCHS
    from ..kernels.toolchain import CompilerNotFound, find_nvcc
    try:
        nvcc = find_nvcc()
    except CompilerNotFound as err:
        return (Row("nvcc", FAIL if needed else ABSENT, one_line(err),
                    "install the CUDA toolkit and put its bin/ on PATH, or set NEONLITE_NVCC "
                    "(sudo resets PATH: run 'sudo env PATH=$PATH neonlite ...')"),
                f"nvcc is needed to build the GPU kernels and {err}")
    try:
        done = subprocess.run([*nvcc.command, "--list-gpu-arch"], capture_output=True,
                              text=True, timeout=60)
        archs = sorted({f"sm_{n}" for n in re.findall(r"compute_(\d+)", done.stdout)},
                       key=lambda a: int(a[3:]))
    except (OSError, subprocess.TimeoutExpired):
        archs = []
    targets = f"builds {archs[0]}..{archs[-1]}" if archs else "its sm_ targets are unknown"
    missing = [a for a in DEFAULT_CUDA_ARCHS if archs and a not in archs]
    text = (f"{nvcc.version} ({nvcc.command[0]}); {targets}; neonlite kernels build makes "
            f"{', '.join(DEFAULT_CUDA_ARCHS)}, the backend its device's own")
    if missing:
        return (Row("nvcc", WARN, f"{text}; cannot build {', '.join(missing)}",
                    "use a CUDA toolkit that supports them"), None)
    return Row("nvcc", OK, text), None


def run_probe(timeout=PROBE_TIMEOUT_S):
    """The probe's findings (dict), or ``{"probe_error": why}``."""
    try:
        done = subprocess.run([sys.executable, "-m", "neonlite.doctor.gpu_probe"],
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, PYTHONSAFEPATH="1"))
    except subprocess.TimeoutExpired:
        return {"probe_error": f"probing pycuda and the CUDA driver did not finish within "
                               f"{timeout} s (a hung driver?)"}
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = one_line(done.stderr.strip().splitlines()[-1]) if done.stderr.strip() else ""
        return {"probe_error": f"probing pycuda and the CUDA driver crashed (exit status "
                               f"{done.returncode}){': ' + tail if tail else ''}"}


def _driver_text(version):
    return f"CUDA {version // 1000}.{version % 1000 // 10}"


def probe_rows(found, needed):
    """(rows, reason or None) from :func:`run_probe`'s findings."""
    missing = FAIL if needed else ABSENT
    if "probe_error" in found:
        why = found["probe_error"]
        return ([Row("CUDA driver", FAIL, why, "check the driver with nvidia-smi; reinstall or "
                     "reboot if it hangs there too")], why)
    if found.get("pycuda") is None:
        why = f"pycuda does not import ({found.get('pycuda_error', '?')})"
        return ([Row("pycuda", missing, why, GPU_INSTALL),
                 Row("CUDA driver", ABSENT, "not probed (needs pycuda)")], why)
    built = found.get("pycuda_cuda")
    built_text = f", built for CUDA {built[0]}.{built[1]}" if built else ""
    rows = [Row("pycuda", OK, f"{found['pycuda']}{built_text}")]
    if found.get("driver") is None:
        why = f"the CUDA driver does not start: {found.get('driver_error', '?')}"
        rows.append(Row("CUDA driver", FAIL, why, "check the NVIDIA driver with nvidia-smi; a "
                        "pycuda built against another CUDA needs rebuilding: pip install "
                        "--no-binary pycuda --force-reinstall pycuda"))
        return rows, why
    driver = found["driver"]
    rows.append(Row("CUDA driver", OK, _driver_text(driver)))
    if built and driver < built[0] * 1000 + built[1] * 10:
        rows[-1] = Row("CUDA driver", WARN, f"{_driver_text(driver)}, older than the CUDA "
                       f"{built[0]}.{built[1]} pycuda was built for",
                       "update the driver, or rebuild pycuda against this CUDA")
    devices = found.get("devices", [])
    if not devices:
        why = "pycuda found no CUDA device on this machine"
        rows.append(Row("devices", missing, why, "run on a machine with an NVIDIA GPU"))
        return rows, why
    for i, d in enumerate(devices):
        rows.append(Row(f"device {i}", OK, f"{d['name']}, compute capability {d['cc']} "
                        f"({d['arch']}), {d['memory_gib']} GiB"))
    why = found.get("backend_error")
    if why:
        rows.append(Row("gpu backend", FAIL, why, "see the rows above"))
    return rows, why


def gpu_rows(needed, timeout=PROBE_TIMEOUT_S):
    """(rows, reason the GPU backend cannot run or None)."""
    nvcc, nvcc_reason = nvcc_row(needed)
    rows, reason = probe_rows(run_probe(timeout), needed)
    return [nvcc, *rows], reason or nvcc_reason
