"""What a quantize process spends before and around its kernels, kept small.

A quantize run imports numpy, gguf and numba (with its machine-code cache loads) for a pass whose
own Python work is a few hundred calls; on a model of tens of MB the imports are most of the run.
Two costs there are not the imports' work itself and are avoided here:

- numpy's OpenBLAS starts one worker thread per core at import, and an idle worker spins
  (sched_yield) for about a tenth of a second before it sleeps: 25-35 ms of CPU per process
  (measured on the 2-core machine) for a command that never multiplies a matrix. Unless the user
  set a BLAS thread count, quantize asks OpenBLAS for one thread (no worker) before numpy loads.
- Python's cyclic garbage collector runs hundreds of collections while numba's import and its
  cache loads create their objects, none of which are garbage. The command runs with the collector
  paused: the pass itself makes no reference cycles (arrays, futures, tuples; reference counting
  frees them), and the collector is switched back on when the command returns (tests run it
  in-process).
"""

import contextlib
import os
import sys

from moetools.cli import collector_paused

# Thread-count variables OpenBLAS reads (an explicit one, the user's, is left alone).
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def quiet_blas(environ=os.environ, loaded=sys.modules):
    """Ask OpenBLAS for a single thread, if numpy has not loaded it yet and the user chose no
    count. Returns whether it did."""
    if "numpy" in loaded or any(name in environ for name in BLAS_THREAD_VARIABLES):
        return False
    environ["OPENBLAS_NUM_THREADS"] = "1"
    return True


@contextlib.contextmanager
def lean_process():
    """Run a quantize command with OpenBLAS on one thread and the cyclic collector paused."""
    quiet_blas()
    with collector_paused():
        yield
