"""One renderer for every command: a rich table on a terminal, JSON in a pipe or with --json.

A command builds a plain document (dicts, lists, numbers, strings, None) and, for terminals, a list
of `Table`s describing the same data; it never prints by itself. rich is imported only when a table
is actually drawn, so the JSON path stays fast.
"""

import json
import sys


class Table:
    """A table to draw on a terminal: `rows` are lists of already formatted cells; `right_align`
    holds the indices of numeric columns. (Not a dataclass: the header path stays import-light.)"""

    def __init__(self, title, columns, rows=None, right_align=(), caption=""):
        self.title = title
        self.columns = list(columns)
        self.rows = list(rows or [])
        self.right_align = tuple(right_align)
        self.caption = caption


def want_json(json_flag):
    """JSON when asked, or when stdout is not a terminal (a pipe or a file)."""
    return bool(json_flag) or not sys.stdout.isatty()


def print_json(doc, stream=None):
    stream = stream or sys.stdout
    stream.write(json.dumps(doc, indent=2, allow_nan=False))
    stream.write("\n")
    stream.flush()


def print_json_line(doc, stream=None):
    """One compact JSON object per line, flushed: for streams such as a followed trace."""
    stream = stream or sys.stdout
    stream.write(json.dumps(doc, separators=(",", ":"), allow_nan=False))
    stream.write("\n")
    stream.flush()


def print_tables(tables, notes=(), stream=None):
    """Draw tables with rich, then notes (plain lines) below them."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=stream or sys.stdout)
    for table in tables:
        rich_table = RichTable(title=table.title, caption=table.caption or None, title_justify="left")
        for index, column in enumerate(table.columns):
            rich_table.add_column(column, justify="right" if index in table.right_align else "left")
        for row in table.rows:
            rich_table.add_row(*[str(cell) for cell in row])
        console.print(rich_table)
    for note in notes:
        console.print(note, highlight=False, markup=False)


def render(doc, tables, json_flag, notes=()):
    """Print `doc` as JSON or `tables` (a list, or a callable returning one) for a terminal."""
    if want_json(json_flag):
        print_json(doc)
    else:
        print_tables(tables() if callable(tables) else tables, notes)


def warn(message):
    """A diagnostic line on stderr; never on stdout, which carries data."""
    sys.stderr.write(f"warning: {message}\n")
    sys.stderr.flush()


def info(message):
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()
