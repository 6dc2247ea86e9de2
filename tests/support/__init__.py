"""What the tests share: the backend harness (``harness``), the CUDA host emulator and the GPU
backend on it (``cuda_host_emulator``, ``gpu_host_backend``, ``gpu_host_tensors``), the
malformed-input generators (``attacks``), the unfused attention path (``attention_unfused``) and
the installed-module importer (``import_every_module``).  Imported as ``support.<module>``."""
