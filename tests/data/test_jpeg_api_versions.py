"""The region-of-interest JPEG kernel compiles against the libjpeg API versions that
libjpeg-turbo is built with: 6b (JPEG_LIB_VERSION 62, the default) and 8 (80, the
``--with-jpeg8`` build).  With the version-8 headers jerror.h has no JERR_ARITH_NOTIMPL, and
the kernel failed to compile on the first H200 machine, whose libjpeg was built that way.
Here the installed jconfig.h is copied with its version changed, ahead on the include path."""
import re
import subprocess
from pathlib import Path

import pytest
from support.requires import requires

from neonlite.kernels.specs import find
from neonlite.kernels.toolchain import find_c_compiler

pytestmark = requires("jpeg_kernel")


def _installed_jconfig(compiler):
    """The jconfig.h the compiler includes (it lives in a multiarch folder on Debian)."""
    run = subprocess.run([*compiler.command, "-E", "-H", "-x", "c", "-"], input=
                         "#include <stdio.h>\n#include <jpeglib.h>\n", capture_output=True,
                         text=True)
    found = [Path(line.split()[-1]) for line in run.stderr.splitlines()
             if line.rstrip().endswith("jconfig.h")]
    if not found:
        pytest.fail(f"jpeglib.h compiles but the compiler names no jconfig.h: {run.stderr[:300]}")
    return found[0]


@pytest.mark.parametrize("version", [62, 70, 80])
def test_the_jpeg_kernel_compiles_against_each_api_version(tmp_path, version):
    compiler = find_c_compiler()
    text = _installed_jconfig(compiler).read_text()
    text, n = re.subn(r"#define\s+JPEG_LIB_VERSION\s+\d+", f"#define JPEG_LIB_VERSION {version}",
                      text)
    assert n == 1
    (tmp_path / "jconfig.h").write_text(text)
    source = find("jpeg_roi").source_path
    run = subprocess.run([*compiler.command, "-fsyntax-only", "-I", str(tmp_path), "-I",
                          str(source.parent), str(source)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
