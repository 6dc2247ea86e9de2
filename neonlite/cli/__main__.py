"""``python -m neonlite.cli``: the same as the ``neonlite`` command."""
import sys

from . import main

sys.exit(main())
