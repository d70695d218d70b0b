"""One renderer for every command: a rich table on a terminal, JSON in a pipe or with --json.

A command builds a plain document (dicts, lists, numbers, strings, None) and, for terminals, a list
of `Table`s describing the same data; it never prints by itself. rich is imported only when a table
is actually drawn, so the JSON path stays fast.
"""

import json
import sys

from moetools.errors import printable_line


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


# What a float JSON has no number for is written as a string, the spelling Python's float() and
# JavaScript's Number() read back: a NaN or infinite value a file really holds (a damaged metadata float)
# stays visible, where null would read as "absent", and the document stays valid JSON.
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _finite(value):
    """`value` with every NaN or infinite float (at any depth) replaced by its NON_FINITE string."""
    if isinstance(value, float):
        return value if value - value == 0 else NON_FINITE[repr(float(value))]
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def json_text(doc, **options):
    """`doc` as strict JSON (json.dumps with `options`). A document holding a NaN or infinite float is
    encoded again with those values as strings (NON_FINITE): the common case pays for no walk."""
    try:
        return json.dumps(doc, allow_nan=False, **options)
    except ValueError:
        return json.dumps(_finite(doc), allow_nan=False, **options)


def print_json(doc, stream=None):
    stream = stream or sys.stdout
    stream.write(json_text(doc, indent=2))
    stream.write("\n")
    stream.flush()


def print_json_line(doc, stream=None):
    """One compact JSON object per line, flushed: for streams such as a followed trace."""
    stream = stream or sys.stdout
    stream.write(json_text(doc, separators=(",", ":")))
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


class ShellLine(str):
    r"""A note that is a shell command to copy (a launch line): printed on its own lines, broken between
    arguments with a trailing ` \` so that a paste into a shell still runs it."""


def shell_words(line):
    """`line` split at its unquoted blanks, each word kept exactly as written (quotes and all)."""
    words, word, quote, escaped = [], "", None, False
    for char in line:
        if escaped:
            word, escaped = word + char, False
        elif char == "\\" and quote != "'":
            word, escaped = word + char, True
        elif quote:
            word += char
            quote = None if char == quote else quote
        elif char in "'\"":
            word, quote = word + char, char
        elif char in " \t":
            if word:
                words.append(word)
            word = ""
        else:
            word += char
    return words + ([word] if word else [])


def shell_lines(line, width, indent="    "):
    r"""A shell command as lines of at most `width` characters: broken only between arguments (an option
    stays with its value), every line but the last ending in ` \`; a comment (`# ...`) is wrapped
    between words, each line a comment. An argument longer than the width is never cut (a quoted regex
    stays whole: cut, it would not paste): it gets a line of its own."""
    if line.lstrip().startswith("#"):
        return wrap_text(line, width, indent="#" + indent[1:])
    words = shell_words(line)
    units = []
    for word in words:
        if units and len(units[-1]) == 1 and units[-1][0].startswith("-") and not word.startswith("-"):
            units[-1].append(word)  # `-c 131072`: an option and its value
        else:
            units.append([word])
    lines, current = [], ""
    for unit in units:
        text = " ".join(unit)
        pieces = [text] if len(indent) + len(text) + 2 <= width or len(unit) == 1 else unit
        for piece in pieces:
            if not current:
                current = piece
            elif len(current) + 1 + len(piece) + 2 <= width:
                current += " " + piece
            else:
                lines.append(current + " \\")
                current = indent + piece
    return lines + [current]


def wrap_text(text, width, indent="  "):
    """A note as lines of at most `width` characters, broken between words, the lines after the first
    indented (`indent`); a word longer than the width (a path) is kept whole."""
    import re
    import textwrap

    # a size stays whole (`32.00 GiB`, never `32.00` / `GiB`): a no-break space, which textwrap keeps in a word
    glued = re.sub(r"(\d) (B|KiB|MiB|GiB|TiB|tok/s)\b", "\\1\u00a0\\2", text)
    lines = textwrap.wrap(glued, width=max(width, len(indent) + 8), subsequent_indent=indent, break_long_words=False,
                          break_on_hyphens=False)
    return [line.replace("\u00a0", " ") for line in lines] or [""]


def _abbreviated_headers(columns, cells, numeric):
    """{index: short header} for the numeric columns whose header has a word wider than every cell and
    than 12 characters (a device named by address, `RPC0[192.168.100.201:50052]`): `RPC0[a]`, spelled
    out below the table."""
    short = {}
    for index, (column, is_number) in enumerate(zip(columns, numeric)):
        widest = max((len(row[index]) for row in cells if index < len(row)), default=0)
        if is_number and _longest_word([column]) > max(widest, 12):
            letter = chr(ord("a") + len(short) % 26)
            stem = column.split("[")[0] if "[" in column else column[:max(1, widest - 3)]
            short[index] = f"{stem[:max(1, widest - 3)]}[{letter}]"
    return short


def _column_groups(floors, available_for):
    """Consecutive groups of columns, each repeating column 0 (the row's name), whose minimum widths fit:
    a table too wide for the terminal is drawn as several, never cut."""
    groups, group = [], [0]
    for index in range(1, len(floors)):
        candidate = group + [index]
        if len(group) > 1 and sum(floors[i] for i in candidate) > available_for(len(candidate)):
            groups.append(group)
            group = [0, index]
        else:
            group = candidate
    groups.append(group)
    # even out the last two (not one table of eight columns and one of two): move columns back while
    # the last is the narrower and still fits
    while len(groups) > 1 and len(groups[-2]) > 2:
        before, last = groups[-2], groups[-1]
        moved = [0, before[-1]] + last[1:]
        if sum(floors[i] for i in moved) > available_for(len(moved)) or (
                sum(floors[i] for i in moved) > sum(floors[i] for i in before[:-1])):
            break
        groups[-2:] = [before[:-1], moved]
    return groups


def table_layout(cells, columns, numeric, room):
    """How a table is drawn when `room(n)` characters hold the cells of n columns: (groups of column
    indices, one table each; the headers, long device names abbreviated; the key lines for those)."""
    headers = list(columns)

    def floors_of(heads):
        return [column_limits(head, [row[index] for row in cells if index < len(row)], numeric[index])[1]
                for index, head in enumerate(heads)]

    keys = []
    if sum(floors_of(headers)) > room(len(headers)):
        short = _abbreviated_headers(headers, cells, numeric)
        keys = [f"{short[index]} = {headers[index]}" for index in sorted(short)]
        headers = [short.get(index, head) for index, head in enumerate(headers)]
    floors = floors_of(headers)
    if sum(floors) <= room(len(headers)) or len(headers) < 3:
        return [list(range(len(headers)))], headers, keys
    return _column_groups(floors, room), headers, keys


def print_tables(tables, notes=(), stream=None):
    """Draw tables with rich, then notes below them. Nothing is wider than the terminal: a title, a
    caption and a note are wrapped between words (lines after the first indented), a launch command
    (ShellLine) is broken between arguments, and a table too wide keeps every header word and number
    whole by abbreviating long device names (with a key below) or by drawing its columns as two tables."""
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    console = Console(file=stream or sys.stdout)
    width = console.width
    narrow = width < NARROW_COLUMNS
    # what the rules and padding of n columns take: narrow, a 2-character gap between columns; else
    # rich's box, 1 character of padding on each side of a cell and n + 1 vertical rules
    gap, edge = (_NARROW_GAP, -_NARROW_GAP) if narrow else (3, 1)

    def room(count):
        return width - gap * count - edge

    def say(lines, style=None):
        for line in lines:
            # soft_wrap: the line is already wrapped to the width; rich must not wrap or crop it again
            console.print(line, style=style, highlight=False, markup=False, soft_wrap=True)

    for table in tables:
        if table.title:
            say(wrap_text(table.title, width), style="table.title")
        cells = [[str(cell) for cell in row] for row in table.rows]
        numeric = [index in table.right_align for index in range(len(table.columns))]
        groups, headers, keys = table_layout(cells, table.columns, numeric, room)
        for group in groups:
            rich_table = RichTable(**(_narrow_style() if narrow else {}))
            limits = [column_limits(headers[index], [row[index] for row in cells if index < len(row)], numeric[index])
                      for index in group]
            widths = narrow_widths(limits, [numeric[index] for index in group], room(len(group)))
            for index, column_width in zip(group, widths):
                rich_table.add_column(Text(headers[index]), justify="right" if numeric[index] else "left", overflow="fold",
                                      width=column_width)
            for row in cells:
                # Text, not markup: a device `RPC0[a]` or a cell `[x]` is shown as written
                rich_table.add_row(*[Text(row[index]) for index in group if index < len(row)])
            console.print(rich_table)
        for key in keys:
            say(wrap_text(key, width))
        if table.caption:
            say(wrap_text(table.caption, width), style="table.caption")
    for number, note in enumerate(notes):
        if isinstance(note, ShellLine):  # a command on its own: a blank line above it and below it
            console.print()
            say(shell_lines(note, width))
            if number + 1 < len(notes):
                console.print()
        else:
            say(wrap_text(note, width))


def echo_shell(text):
    """Shell text (`--emit`) to stdout: as is in a pipe or a file (what `eval "$(...)"` reads), broken
    between arguments to the terminal's width on a terminal (shutil.get_terminal_size: COLUMNS, else
    the terminal)."""
    if not sys.stdout.isatty():
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    import shutil

    width = shutil.get_terminal_size().columns
    lines = []
    for line in text.splitlines():
        lines += shell_lines(line, width) if len(line) > width else [line]
    sys.stdout.write("\n".join(lines) + ("\n" if text.endswith("\n") else ""))
    sys.stdout.flush()


def render(doc, tables, json_flag, notes=()):
    """Print `doc` as JSON or `tables` (a list, or a callable returning one) for a terminal."""
    if want_json(json_flag):
        print_json(doc)
    else:
        print_tables(tables() if callable(tables) else tables, notes)


def _stderr_width():
    """The width of the terminal stderr is on (COLUMNS first), or None when stderr is not a terminal."""
    import os

    try:
        if not sys.stderr.isatty():
            return None
        columns = os.environ.get("COLUMNS", "")
        return int(columns) if columns.isdigit() and int(columns) > 0 else os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return None


def warn(message):
    """A diagnostic on stderr; never on stdout, which carries data. One line in a pipe or a log (a
    script greps it); on a terminal wrapped between words to its width, like every note."""
    width = _stderr_width()
    text = printable_line(f"warning: {message}")  # (a name read from a file may hold a newline)
    lines = wrap_text(text, width) if width else [text]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()


def info(message):
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()
