"""numba's on-disk machine-code cache, written best effort.

numba writes a compiled kernel's cache (index and data files beside the module, or in its user cache)
right after compiling it, inside the first call, and lets any OSError of that write escape the call.
On a full drive (ENOSPC), under a file-size limit (EFBIG) or in a folder that turned read-only, a
moetools command would then fail on a file the user never named, before it wrote its own output. The
cache only saves the next run's compile: the kernel is already compiled and registered in memory when
numba saves it (Dispatcher.compile adds the overload first), so a failed save is skipped and the run
goes on; the next run compiles again. numba's own write goes to a temporary file renamed into place,
and removes that file when the write fails, so nothing half-written is left for a later load.

numba also keeps, with a function's cached code, the stamp (st_mtime, st_size) of the file that
defines it, and discards the code once that file changes; it does not look at the files of the
functions it inlined or called. Kernels split over several modules pass a `stamp` over all of them
(`source_stamp`): the cached code of each is then discarded when any one of those files changes.

Imported only by the compiled-kernel modules (it imports numba).
"""

import os

from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher


def source_stamp(paths):
    """numba's freshness stamp of one file, (st_mtime, st_size), over every file of `paths`: a tuple of
    (name, st_mtime, st_size), or None for no file (numba's own stamp then serves)."""
    stamps = []
    for path in paths:
        st = os.stat(path)
        stamps.append((os.path.basename(path), st.st_mtime, st.st_size))
    return tuple(stamps) or None


class BestEffortCache(FunctionCache):
    """numba's FunctionCache whose saves may fail: the overload stays compiled in memory. With a
    `stamp` (source_stamp), its cached code counts as fresh only under that stamp."""

    def __init__(self, py_func, stamp=None):
        super().__init__(py_func)
        cache_file = getattr(self, "_cache_file", None)
        if stamp is not None and hasattr(cache_file, "_source_stamp"):  # numba 0.60-0.68's place for it
            cache_file._source_stamp = stamp

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except OSError:
            pass


def best_effort(dispatcher, stamp=None):
    """`dispatcher` with a BestEffortCache (fresh under `stamp`, when given), returned. Dispatchers keep
    their cache in `_cache` (numba 0.60-0.68); one that does not (another numba) is left as it is:
    numba's own behaviour. One already switched is left as it is."""
    if isinstance(dispatcher, Dispatcher) and type(getattr(dispatcher, "_cache", None)) is FunctionCache:
        dispatcher._cache = BestEffortCache(dispatcher.py_func, stamp)
    return dispatcher


def make_cache_writes_best_effort(namespace, stamp=None):
    """best_effort() on every numba dispatcher in `namespace` (a module's globals()); how many there were."""
    dispatchers = [value for value in list(namespace.values()) if isinstance(value, Dispatcher)]
    for dispatcher in dispatchers:
        best_effort(dispatcher, stamp)
    return len(dispatchers)
