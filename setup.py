"""neonlite: a graph-free deep learning framework with CPU (numpy + C) and GPU (CUDA) backends.

The top-level folders ``backends/``, ``layers/`` and ``kernels/`` install as the subpackages
``neonlite.backends``, ``neonlite.layers`` and ``neonlite.kernels``.
"""
from setuptools import setup

MAPPED = {"neonlite.backends": "backends", "neonlite.layers": "layers",
          "neonlite.kernels": "kernels"}

setup(
    name="neonlite",
    version="0.1.0",
    description="A graph-free deep learning framework with numpy/C and CUDA backends",
    python_requires=">=3.10",
    packages=["neonlite", "neonlite.transforms", "neonlite.optimizers", "neonlite.data",
              "neonlite.config", "neonlite.cli", "neonlite.distributed", *MAPPED],
    package_dir=MAPPED,
    package_data={"neonlite.kernels": ["cpu/*.c", "cpu/*.h", "cuda/*.cu", "cuda/*.cuh"]},
    install_requires=["numpy>=1.24", "cffi>=1.15", "h5py>=3.8", "pyyaml>=6.0", "tqdm>=4.60"],
    extras_require={
        "gpu": ["pycuda>=2024.1"],
        "mkl": ["mkl>=2023; platform_machine == 'x86_64'"],
        "test": ["pytest>=7", "hypothesis>=6", "matplotlib>=3.6", "mkl>=2023; platform_machine == 'x86_64'"],
        "plot": ["matplotlib>=3.6"],
        "mpi": ["mpi4py>=4.0", "openmpi>=5.0; platform_system == 'Linux'"],
    },
    entry_points={"console_scripts": ["neonlite=neonlite.cli:main"]},
)
