"""The one place the version lives (read by pyproject and the user agent)."""

__version__ = "0.1.0"
