"""A command that fails the way a bug does, registered only by tests/test_toplevel_errors.py."""

import click


@click.command()
@click.argument("kind", type=click.Choice(["index", "memory", "zero"]))
def boom_command(kind):
    """Raise an exception no moetools code path expects."""
    if kind == "index":
        [][1]
    elif kind == "memory":
        raise MemoryError()
    else:
        1 / 0
