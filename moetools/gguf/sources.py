"""Old home of MODEL source parsing: re-exports moetools.gguf.locator (parsing) and
moetools.gguf.open (open_source, list_sets) for one release (until 0.3). New code imports from
those modules."""

from moetools.gguf.locator import (  # noqa: F401
    DEFAULT_CHUNK,
    DEFAULT_PARALLEL,
    DEFAULT_TIMEOUT,
    REMOTE_PREFIXES,
    FetchSettings,
    is_remote,
    is_repo,
    llama_model_args,
    parse_hf,
    refuse_remote,
)
from moetools.gguf.open import list_sets, open_source  # noqa: F401
