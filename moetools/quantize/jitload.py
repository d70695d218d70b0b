"""Getting the compiled quantize kernels' machine code out of numba's cache cheaply.

numba's own first call of a cached function costs a small tier a fifth of its CPU: it types the
arguments in Python (which, for an array, imports numpy.ma) and refreshes the whole target context
(imports and registers every typing and lowering registry numba has) before it looks in its cache,
although rebuilding cached machine code needs only numba's runtime. Here each driver is loaded by an
explicit signature (`load_signature`), through a cache lookup that initialises only the runtime
(`cheap_cache_loads`); a lookup that misses compiles exactly as numba does (its compiler refreshes
the context itself). `is_cached` tells, before a run, which drivers a first run will compile.

The kernels are handed read-only arrays (kernels._read_only), and numba's dispatcher types only
writable, aligned arrays in C: every call with a read-only one goes back to Python's `typeof`,
whose array rule first asks whether the array is a numpy.ma.MaskedArray, and that question imports
numpy.ma (35 ms of CPU, once per process). `cheap_array_typing` gives the dispatchers a typing
callback that answers a plain numpy array itself (the same type numba's rule gives it) and leaves
everything else to numba's own.

Only kernels/__init__.py uses this (on every *_jit.py module of the package), and only once numba has
imported; everything falls back to numba's ordinary path when numba's cache objects are not the ones
this was written for (numba >= 0.60).
"""

import numba
import numpy as np
from numba import types
from numba.core.dispatcher import Dispatcher

_LOADED = set()  # (id(dispatcher), signature) already loaded or compiled in this process


def array(dtype, ndim, read_only):
    """numba's type of a C-contiguous array (what typeof gives for one)."""
    return types.Array(numba.from_dtype(np.dtype(dtype)), ndim, "C", readonly=read_only)


def _cache_of(dispatcher):
    cache = getattr(dispatcher, "_cache", None)
    if cache is None or not all(hasattr(cache, name) for name in ("_load_overload", "_index_key", "_cache_file")):
        return None
    return cache


def _dispatchers(modules):
    """The numba functions among the values of `modules`, each once (a module imports others' too)."""
    found = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Dispatcher):
                found.setdefault(id(value), value)
    return list(found.values())


def cheap_cache_loads(*modules):
    """Make every cached numba function of `modules` look up its cache after initialising only
    numba's runtime, not the whole target context. Returns how many were changed."""
    from numba.core.runtime import rtsys

    changed = 0
    for value in _dispatchers(modules):
        cache = _cache_of(value)
        if cache is None or not hasattr(cache, "_guard_against_spurious_io_errors"):
            continue

        def load_overload(sig, target_context, cache=cache, numbas_own=cache.load_overload):
            try:
                rtsys.initialize(target_context)
                with cache._guard_against_spurious_io_errors():
                    return cache._load_overload(sig, target_context)
            except (TypeError, AttributeError):  # a numba whose private cache calls differ: its own path
                return numbas_own(sig, target_context)
            return None  # an access error the guard swallowed (Windows): numba compiles

        cache.load_overload = load_overload
        changed += 1
    return changed


def array_type(value):
    """numba's type of the plain numpy array `value` (what its typeof rule gives: dtype, dimensions,
    layout, read-only), without the MaskedArray check; memoised per distinct kind."""
    from numba.np import numpy_support

    flags = value.flags
    layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
    key = (value.dtype, value.ndim, layout, not flags.writeable)
    found = _ARRAY_TYPES.get(key)
    if found is None:
        found = _ARRAY_TYPES[key] = types.Array(numpy_support.from_dtype(value.dtype), value.ndim, layout,
                                                readonly=not flags.writeable)
    return found


_ARRAY_TYPES = {}


def cheap_array_typing(*modules):
    """Give every numba function of `modules` a typing callback (the one numba's dispatcher calls for
    an argument it cannot type in C: a read-only array) that types a plain numpy array with
    `array_type` and anything else with numba's own. Returns how many were changed."""
    changed = 0
    for value in _dispatchers(modules):
        numbas_own = getattr(value, "typeof_pyval", None)
        active = getattr(value, "_types_active_call", None)
        if numbas_own is None or not hasattr(active, "add"):
            continue

        def typeof_pyval(val, numbas_own=numbas_own, active=active):
            if type(val) is not np.ndarray:
                return numbas_own(val)
            try:
                found = array_type(val)
            except Exception:  # a dtype numba has no type for: its own answer (pyobject)
                return numbas_own(val)
            active.add(found)  # as numba's callback records it
            return found

        value.typeof_pyval = typeof_pyval
        changed += 1
    return changed


def load_signature(dispatcher, sig):
    """Load (or, on a first run, compile) `dispatcher`'s machine code for `sig` (a tuple of numba
    types: exactly what the dispatcher makes of the arguments it is then called with), once per
    process, without typing arguments in Python; the call that follows goes straight to it."""
    if (id(dispatcher), sig) not in _LOADED:
        dispatcher.compile(sig)
        _LOADED.add((id(dispatcher), sig))


def is_cached(dispatcher, sig):
    """Whether numba's cache holds `dispatcher`'s machine code for `sig` (a tuple of numba types) for
    this machine and this source: False means the first call compiles it. None when unknown."""
    if (id(dispatcher), sig) in _LOADED or tuple(sig) in dispatcher.overloads:
        return True
    cache = _cache_of(dispatcher)
    if cache is None:
        return None
    try:
        key = cache._index_key(sig, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # an unreadable index: numba itself would compile
        return None
