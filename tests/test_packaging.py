"""The wheel built from a checkout ships what an installed user needs: the checkpoints, the autopilot, the CLI.

No index serves ``clef-agents``; users install from a clone (``pip install -e ".[all]"``) or from a wheel built
from it (``pip wheel --no-deps . -w dist``). This builds that wheel, offline, from a copy of the checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _copy_checkout(dest: Path) -> Path:
    """The files a build reads, copied so that building leaves the working tree untouched (no build/, egg-info)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "clef_agents", dest / "clef_agents", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _package_files(folder: str, pattern: str = "*") -> dict[str, int]:
    """Files under ``clef_agents/<folder>`` in the checkout, by their path in a wheel, with their sizes."""
    base = ROOT / "clef_agents" / folder
    return {
        path.relative_to(ROOT).as_posix(): path.stat().st_size
        for path in base.rglob(pattern)
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_a_wheel_built_from_the_checkout_ships_the_checkpoints_and_the_autopilot(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    source = _copy_checkout(tmp_path / "checkout")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            str(source),
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("clef_agents-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        sizes = {info.filename: info.file_size for info in archive.infolist()}
        entry_points = next(archive.read(n).decode() for n in sizes if n.endswith(".dist-info/entry_points.txt"))

    checkpoints = _package_files("checkpoints")
    assert {"clef_agents/checkpoints/mini/config.json", "clef_agents/checkpoints/mini/head.safetensors"} <= set(
        checkpoints
    )
    missing = sorted(set(checkpoints) - set(sizes))
    assert not missing, f"the wheel lacks {len(missing)} checkpoint files, e.g. {missing[:5]}"
    changed = sorted(name for name, size in checkpoints.items() if sizes[name] != size)
    assert not changed, f"checkpoint files differ in size in the wheel: {changed[:5]}"

    autopilot = _package_files("autopilot", "*.py")
    assert "clef_agents/autopilot/__init__.py" in autopilot
    assert not sorted(set(autopilot) - set(sizes)), "the wheel lacks autopilot modules"
    assert "clef_agents/py.typed" in sizes
    assert "clef-agents = clef_agents.cli:main" in entry_points
