"""One helper for every package whose public names load on first use (``import clef_agents`` stays light).

Example:
    >>> getattr_, dir_ = lazy_attributes("pkg", {"sqrt": "math"}, {})
    >>> getattr_("sqrt")(9.0), dir_()
    (3.0, ['sqrt'])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_attributes(
    package: str, modules: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: ``modules`` maps each public name to the module that defines it;
    a name is imported on first use and kept in ``namespace`` (the package's ``globals()``)."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(modules) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
