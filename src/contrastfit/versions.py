"""Library versions recorded with every result (pitfall 9: results depend on versions)."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

_PACKAGES = ("contrastfit", "torch", "transformers", "datasets", "accelerate", "scikit-learn", "scipy", "numpy", "tokenizers", "safetensors")


def library_versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
