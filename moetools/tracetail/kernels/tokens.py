"""The trace segmenter's token-boundary rule over runs of equal keys (reader.Tokeniser.feed). Compiled
by stackjit.py; the interpreter runs it as it is without numba."""


def token_cuts(run_keys, last, stamp, cuts):
    """The segmenter's boundary rule over runs of equal keys (TokenSegmenter::push): a key already
    seen in the open token, reappearing after another key, starts the next token. run_keys: each
    run's key (small ints); last: the key before the first run (-1: none); stamp[key] == the open
    token's number (0 at the start: keys already in it) when the key was seen in it. Writes the runs
    that start a token to cuts; returns (how many, the open token's number). Compiled by stackjit;
    the interpreter runs it without numba."""
    n_cuts = 0
    open_token = 0
    for i in range(len(run_keys)):
        key = run_keys[i]
        if key != last and stamp[key] == open_token:
            cuts[n_cuts] = i
            n_cuts += 1
            open_token += 1
        stamp[key] = open_token
        last = key
    return n_cuts, open_token
