"""The ptojax version, recorded in exported states and case files."""

__version__ = "0.1.0"
