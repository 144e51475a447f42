"""Regular expressions compiled on first use.

Importing `re` (and `enum` with it) and compiling a module's patterns at import cost
milliseconds of every process start, yet a healthy health check matches none of most
modules' patterns. `compile()` here returns a stand-in that imports `re` and compiles
the pattern the first time one of its methods is called, and behaves as the compiled
pattern from then on.
"""
from __future__ import annotations

from .. import TYPE_CHECKING

if TYPE_CHECKING:
    import re


class LazyPattern:
    __slots__ = ("_source", "_flags", "_compiled")

    def __init__(self, source: str, flags: int = 0):
        self._source = source
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str):
        # Only reached for names the stand-in lacks: match, search, sub, pattern, ...
        if self._compiled is None:
            import re
            self._compiled = re.compile(self._source, self._flags)
        return getattr(self._compiled, name)

    def __repr__(self) -> str:
        return f"lazyre.compile({self._source!r})"


def compile(source: str, flags: int = 0):  # noqa: A001 - mirrors re.compile
    return LazyPattern(source, flags)
