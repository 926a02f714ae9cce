"""fenceline: an execution control plane."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fenceline")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
