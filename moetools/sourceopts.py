"""The click options every command that takes a remote MODEL shares: `--offline`, `--timeout`.

    @click.command()
    @source_options
    def command(model, fetch, ...):  # fetch: a moetools.gguf.locator.FetchSettings

Kept apart from the reader (pure, no click) and from any tool's core.
"""

import functools

import click

from moetools.gguf.locator import DEFAULT_TIMEOUT, FetchSettings


def source_options(command):
    """Add --offline and --timeout; the command receives them as one `fetch` FetchSettings."""

    @click.option("--offline", is_flag=True, help="Remote MODEL: use only the header cache, make no request (also HF_HUB_OFFLINE=1).")
    @click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True, metavar="SECONDS",
                  help="Remote MODEL: give up on a request after this long.")
    @functools.wraps(command)
    def wrapper(*args, offline, timeout, **kwargs):
        return command(*args, fetch=FetchSettings(timeout=timeout, offline=offline, include=kwargs.pop("include", None)), **kwargs)

    return wrapper
