"""The default number of torch threads for a process that answers requests.

Measured (bench/threads/results.md, 2 cores, one untaught question on mini): two threads answer 6 % faster than
one on a quiet machine and 2.0x slower at p50 (3.7x at p90) beside one busy process, because every parallel
region of a forward waits for all its threads. So the entry points that own their process — ``load_model(spec)``
(the CLI, the server, the ready graphs) and the training commands — run torch on one thread unless told otherwise:
``CLEF_AGENTS_THREADS=N`` (or ``OMP_NUM_THREADS``, or ``--threads``) sets it. ``ClefDecisionModel.from_pretrained``
called directly leaves torch's threads as the caller set them.

Example:
    >>> chosen_threads({"CLEF_AGENTS_THREADS": "3"}), chosen_threads({"OMP_NUM_THREADS": "4"}), chosen_threads({})
    (3, None, 1)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

THREADS_ENV = "CLEF_AGENTS_THREADS"
DEFAULT_THREADS = 1


def chosen_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """Threads to use: ``CLEF_AGENTS_THREADS`` when set, None when ``OMP_NUM_THREADS`` is (torch follows it),
    else ``DEFAULT_THREADS``. Raises ``ValueError`` for a value that is not a positive integer."""
    environ = os.environ if environ is None else environ
    raw = environ.get(THREADS_ENV)
    if raw is None:
        return None if environ.get("OMP_NUM_THREADS") else DEFAULT_THREADS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{THREADS_ENV} must be a positive integer, got {raw!r}")
    return value


def apply_default_threads() -> int:
    """Set torch's thread count as ``chosen_threads`` says (nothing when ``OMP_NUM_THREADS`` rules); returns it."""
    import torch  # noqa: PLC0415

    threads = chosen_threads()
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def command_threads(threads: int | None) -> int:
    """What a command's ``--threads`` means: that many threads for the whole process, or the measured default
    (``apply_default_threads``) when it is not given; returns the count torch runs with."""
    if threads:
        use_threads(threads)
        return threads
    return apply_default_threads()


def use_threads(threads: int) -> None:
    """Run torch on ``threads`` threads here and in every model loaded later in this process (``--threads``)."""
    import torch  # noqa: PLC0415

    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    os.environ[THREADS_ENV] = str(threads)
    torch.set_num_threads(threads)
