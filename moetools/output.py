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


# Below this many columns tables drop their vertical rules and their edges, and the column widths are
# chosen here rather than by rich (which crops a table whose columns cannot all shrink), so that a ledger
# of eight or nine columns still fits an 80-column terminal with every header and number whole.
NARROW_COLUMNS = 100
_NARROW_GAP = 2  # the blank column rule and one padding (collapsed: two neighbours share it)


def _narrow_style():
    from rich import box

    return {"box": box.SIMPLE_HEAD, "pad_edge": False, "show_edge": False, "collapse_padding": True}


def _longest_word(texts):
    return max((len(word) for text in texts for word in text.split()), default=0)


def column_limits(header, cells, numeric):
    """(natural, minimum) width of a column: numbers and sizes (`25.81 GiB`) keep their whole width and
    only their header may wrap between words; text may wrap between words, or fold inside a long one."""
    natural = max([len(header)] + [len(cell) for cell in cells])
    if numeric:
        return natural, max([_longest_word([header])] + [len(cell) for cell in cells])
    return natural, max(_longest_word([header]), min(_longest_word(cells), 16))


def _shrink(widths, floors, excess):
    while excess > 0:
        slack = [width - floor for width, floor in zip(widths, floors)]
        widest = max(range(len(widths)), key=lambda i: slack[i])
        if slack[widest] <= 0:
            break
        widths[widest] -= 1
        excess -= 1
    return excess


def narrow_widths(limits, numeric, available):
    """Column widths that fit `available` characters when they can: shrink the columns with the most
    room above their minimum first; text columns go below it (folding inside words, down to 6) only as
    a last resort. Numbers never shrink below their widest cell."""
    widths = [natural for natural, _ in limits]
    floors = [minimum for _, minimum in limits]
    excess = _shrink(widths, floors, sum(widths) - available)
    if excess > 0:
        floors = [floor if is_number else min(floor, 6) for floor, is_number in zip(floors, numeric)]
        _shrink(widths, floors, excess)
    return widths


def fold_left(name, width):
    """`…/b/tiny-gptoss-Q8_0.gguf` for a name longer than `width`: keep the end, where the file name that
    tells two rows apart lives (a table's first column; JSON keeps the whole path)."""
    name = str(name)
    if width < 2 or len(name) <= width:
        return name
    return "\u2026" + name[-(width - 1):]


def print_tables(tables, notes=(), stream=None):
    """Draw tables with rich, then notes (plain lines) below them."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=stream or sys.stdout)
    narrow = console.width < NARROW_COLUMNS
    for table in tables:
        rich_table = RichTable(title=table.title, caption=table.caption or None, title_justify="left",
                               **(_narrow_style() if narrow else {}))
        cells = [[str(cell) for cell in row] for row in table.rows]
        numeric = [index in table.right_align for index in range(len(table.columns))]
        widths = [None] * len(table.columns)
        if narrow:
            limits = [column_limits(column, [row[index] for row in cells if index < len(row)], numeric[index])
                      for index, column in enumerate(table.columns)]
            widths = narrow_widths(limits, numeric, console.width - _NARROW_GAP * (len(limits) - 1))
        for column, width, is_number in zip(table.columns, widths, numeric):
            rich_table.add_column(column, justify="right" if is_number else "left", overflow="fold", width=width)
        for row in cells:
            rich_table.add_row(*row)
        console.print(rich_table)
    for note in notes:
        # soft_wrap: a note (often a command line to copy) is one line that the terminal wraps, never
        # broken with newlines or cropped
        console.print(note, highlight=False, markup=False, soft_wrap=True)


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
