"""One exception hierarchy, mapped to exit codes in one place.

Cores raise these; `cli.py` turns any of them into one clear line on stderr and the exit code it
carries. A command never formats its own errors.
"""

EXIT_OK = 0
EXIT_NO = 1  # the command did its job and the answer is "no"
EXIT_USAGE = 2  # usage error or unreadable/invalid input (and, with a hint to report it, a bug)
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


def shown_name(name):
    """A key or name as an error line shows it: as it is when every character is printable, else quoted
    the way Python's repr quotes it (a newline, an escape sequence or a NUL in a name read from a file
    must not break the one line or drive the terminal)."""
    name = str(name)
    return name if name.isprintable() else repr(name)


def printable_line(text):
    """`text` with every character that is not printable escaped as repr escapes it: the last guard that
    keeps an error one line, whatever a message quoted."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


class MoeError(Exception):
    """Base of every error moetools reports to a user. `str(err)` is the one line shown."""

    exit_code = EXIT_USAGE


class InputError(MoeError):
    """An input file is unreadable or invalid. Names the file and, where known, the offset or key."""

    def __init__(self, path, problem, offset=None, key=None):
        self.path = str(path)
        self.problem = problem
        self.offset = offset
        self.key = key
        where = self.path
        if offset is not None:
            where += f" at offset {offset}"
        if key is not None:
            where += f" (key {shown_name(key)})"
        super().__init__(f"{where}: {problem}")


class GGUFError(InputError):
    """A GGUF file (or shard set) that cannot be read as one."""


class RemoteError(InputError):
    """A remote MODEL (URL or hf:// name) that cannot be read: HTTP status, timeout, redirect loop,
    a server without range support, a file that changed while read. Names the URL or hf:// name."""


class FormatError(InputError):
    """A moetools wire-format file (trace, plan, manifest, curve, container) that is invalid."""


class UsageError(MoeError):
    """Options that cannot work together or a value that does not parse."""


class OutputError(MoeError):
    """An output could not be written (not writable, disk full, exists without --force)."""


class AnswerNo(MoeError):
    """Not a failure: the command did its job and the answer is no (exit 1)."""

    exit_code = EXIT_NO
