"""The one place neonlite's version is written: ``setup.py`` reads it from this file's text and
``neonlite --version`` prints it."""
__version__ = "0.1.0"
