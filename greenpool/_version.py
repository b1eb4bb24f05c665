"""The one place greenpool's version is kept."""

__version__ = "0.1.0.dev0"
