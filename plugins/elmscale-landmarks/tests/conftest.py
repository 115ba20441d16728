"""Run against the installed package; from a source checkout without installing, fall back
to ../src so ``pytest`` works either way."""

import sys
from pathlib import Path

try:
    import elmscale_landmarks  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
