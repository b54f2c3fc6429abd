"""Loading a script of bench/ (not a package) as a module, for the tests of its scoring and its runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Iterator

BENCH = Path(__file__).resolve().parent.parent / "bench"


def loaded(script: str, name: str) -> Iterator:
    """Yield ``bench/<script>`` loaded as the module ``name`` (registered while in use: dataclasses look
    their module up while a class is made), and unregister it after."""
    spec = importlib.util.spec_from_file_location(name, BENCH / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
