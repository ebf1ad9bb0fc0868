"""The package version (pyproject.toml's [project] version), in the bottom layer so every stage can
stamp results with it without importing the package root."""

__version__ = "0.1.0"
