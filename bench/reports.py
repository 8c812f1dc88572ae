"""Writing a bench script's result: the JSON beside its markdown report, and its progress lines."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def log(message: str) -> None:
    """Print ``message`` after the time of day, at once (long runs write to a log file)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def write_report(stem: str | Path, data: dict[str, Any], markdown: str) -> None:
    """Write ``data`` to ``stem.json`` and ``markdown`` to ``stem.md``, then print the markdown.

    Example:
        >>> write_report("bench/teaching/curve", {"items": 3}, "# Curve\\n")  # doctest: +SKIP
    """
    stem = Path(stem)
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(markdown, encoding="utf-8")
    print(markdown)
