"""numba's on-disk machine-code cache, written best effort.

numba writes a compiled kernel's cache (index and data files beside the module, or in its user cache)
right after compiling it, inside the first call, and lets any OSError of that write escape the call.
On a full drive (ENOSPC), under a file-size limit (EFBIG) or in a folder that turned read-only, a
moetools command would then fail on a file the user never named, before it wrote its own output. The
cache only saves the next run's compile: the kernel is already compiled and registered in memory when
numba saves it (Dispatcher.compile adds the overload first), so a failed save is skipped and the run
goes on; the next run compiles again. numba's own write goes to a temporary file renamed into place,
and removes that file when the write fails, so nothing half-written is left for a later load.

Imported only by the compiled-kernel modules (it imports numba).
"""

from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher


class BestEffortCache(FunctionCache):
    """numba's FunctionCache whose saves may fail: the overload stays compiled in memory."""

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except OSError:
            pass


def best_effort(dispatcher):
    """`dispatcher` with a BestEffortCache, returned. Dispatchers keep their cache in `_cache` (numba
    0.60-0.68); one that does not (another numba) is left as it is: numba's own behaviour."""
    if isinstance(dispatcher, Dispatcher) and type(getattr(dispatcher, "_cache", None)) is FunctionCache:
        dispatcher._cache = BestEffortCache(dispatcher.py_func)
    return dispatcher


def make_cache_writes_best_effort(namespace):
    """best_effort() on every numba dispatcher in `namespace` (a module's globals()); how many there were."""
    dispatchers = [value for value in list(namespace.values()) if isinstance(value, Dispatcher)]
    for dispatcher in dispatchers:
        best_effort(dispatcher)
    return len(dispatchers)
