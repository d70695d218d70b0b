"""The `predictive` residency policy: evict the expert whose next use is expected farthest away.

Online: when a layer's visit of token t ends, every expert of that layer gets the logistic
probability p that token t + 1 uses it, from its own history and a sequence term (demandkernels.
predict has the features); nothing later than that visit is read. Its eviction key is the expected
number of layer steps until it is used, d + L x (1 - p) / p, with d the layers until its layer comes
up again and L the MoE layers (a geometric wait of (1 - p) / p more tokens): the demand cache evicts
the largest, as Belady evicts the farthest known next use.

The weights are fixed here, not fitted to the trace being replayed; see WEIGHTS.
"""

import numpy as np

import moetools.tracetail.kernels.demand as demandkernels
from moetools.tracetail import curves

HISTORY_TOKENS = 128  # the sequence term looks this many tokens back (the shared traces are shorter)
SEQUENCE_GAMMA = 4.0  # a past token's vote weight = (overlap share so far) ** gamma
MAX_TOP_K = 64  # experts per layer per token kept in the history ring

# Logistic weights over demandkernels.predict's features, in its order: recency buckets (age 1, 2,
# 3-4, 5-8, 9-16, 17-64, older, never: the buckets carry the intercept), log(1 + decayed count) at
# half-lives 1, 4, 16, 64 tokens, 1 / last interval, overdue, sequence vote, vote > 0.
# Fitted once (benchmarks/fit_predictive.py: L2-regularised logistic regression, lambda 1, labels
# "token t + 1 uses the expert") on the gpt-oss-120b trace of ../shared/traces and held out on the
# Qwen3-30B-A3B trace; rounded to 3 decimals. The gpt-oss trace has 64 decode tokens, so its "older
# than 64" bucket never occurs there: it is set between the 17-64 bucket and "never", not fitted.
WEIGHTS = np.array([
    -5.898, -4.588, -3.941, -3.906, -4.422, -4.617, -5.0, -5.249,
    4.456, -1.559, 1.897, -0.326,
    -0.292, 0.189, 1.103, 0.214,
])


def predict_function():
    compiled = curves.compiled_stack()
    return demandkernels.predict if compiled is None else compiled.predict


class Predictor:
    """The predictor's state between calls (resumable: prefixes give the same keys)."""

    def __init__(self, space, weights=None, gamma=SEQUENCE_GAMMA, history=HISTORY_TOKENS, top_k=MAX_TOP_K):
        d, n_layers, n_experts = space.size, space.n_layers, space.n_experts
        self.space = space
        self.weights = np.asarray(WEIGHTS if weights is None else weights, dtype=np.float64)
        if len(self.weights) != demandkernels.N_FEATURES:
            raise ValueError(f"predictive weights: {len(self.weights)} given, {demandkernels.N_FEATURES} features")
        self.gamma = float(gamma)
        self.last_use = np.full(d, -1, dtype=np.int64)
        self.prev_use = np.full(d, -1, dtype=np.int64)
        self.counts = np.zeros((len(demandkernels.HALF_LIVES), d))
        self.layer_at = np.full(n_layers, -1, dtype=np.int64)
        self.hist = np.full((int(history), n_layers, int(top_k)), -1, dtype=np.int64)
        self.hist_count = np.zeros((int(history), n_layers), dtype=np.int64)
        self.hist_token = np.full(int(history), -1, dtype=np.int64)
        self.sim = np.zeros(int(history))
        self.mark = np.zeros(n_experts, dtype=np.int64)
        self.vote = np.zeros(n_experts)
        self.group = np.zeros(n_experts, dtype=np.int64)
        self.misc = np.array([-1, 0, -1, 0], dtype=np.int64)
        self.latest = np.full(d, -np.inf)  # each expert's latest key (for ranking pins)

    def run(self, batch, features=False):
        """Keys for `batch` (whole decode tokens): (tab_a, tab_b) of shape (tokens, items), and the
        feature array (tokens, items, N_FEATURES) when `features`."""
        shape = (batch.tokens, self.space.size)
        tab_a = np.zeros(shape)
        tab_b = np.full(shape, -1, dtype=np.int64)
        feats = np.zeros(shape + (demandkernels.N_FEATURES,) if features else (0, 0, 0))
        predict_function()(batch.items, batch.visits, batch.rows, self.space.n_layers, self.space.n_experts, self.weights,
                           self.gamma, self.last_use, self.prev_use, self.counts, self.layer_at, self.hist, self.hist_count, self.hist_token,
                           self.sim, self.mark, self.vote, self.group, self.misc, tab_a, tab_b, feats)
        if batch.tokens:
            visited_row = np.full(self.space.n_layers, -1, dtype=np.int64)
            np.maximum.at(visited_row, batch.visits % self.space.n_layers, batch.rows)  # each layer's last visit
            for layer in np.flatnonzero(visited_row >= 0):
                span = slice(layer * self.space.n_experts, (layer + 1) * self.space.n_experts)
                self.latest[span] = tab_a[visited_row[layer], span]
        return (tab_a, tab_b, feats) if features else (tab_a, tab_b)
