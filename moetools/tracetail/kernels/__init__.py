"""trace-tail's kernels: the plain loops over numpy arrays that stackjit.py compiles with numba and
that the interpreter runs as they are when numba is absent or $MOETOOLS_NO_JIT is set (the same
source both ways, so both engines make the same decisions).

    demand.py       the demand-cache replay, the bandit's token loop, the predictor's feature pass
    instruments.py  one decode token of instruments.Instruments.decode
    policies.py     one decode token of policies.ScoredPolicies.decode (the top-S sets)
    tokens.py       the trace segmenter's token-boundary rule (reader.Tokeniser)

A kernel imports numpy and other kernels only, never curves or the modules that call it: the compiled
engine is looked up through curves.compiled_stack, which imports stackjit, which imports these.
"""
