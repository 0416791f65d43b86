"""Load a benchmark script (``bench/NAME.py``) as a module, the way ``python bench/NAME.py`` sees its imports."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_module(name: str):
    path = BENCH / f"{name}.py"
    sys.path.insert(0, str(path.parent))  # as `python bench/NAME.py` has it: the script's own folder first
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))
