"""trace-tail: replay or follow an expert trace and measure residency policies (issue 7).

reader (12-byte records -> tokens), importers (CSV, JSON lines, numpy), policies, curves (one-pass
stack distances), instruments, core (engine and whole-trace analysis), svg, command (click).
kernels/ holds the plain loops that stackjit compiles with numba (and the interpreter runs without
it); they import no module above them.
"""
