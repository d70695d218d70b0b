"""The `moetools` command: a thin root that only wires subcommands together.

Each subcommand lives in its own module and is imported only when it runs (or when `--help`
lists it), so `moetools inspect` does not pay for numpy, gguf or rich unless it needs them.
"""

import contextlib
import errno
import gc
import importlib
import importlib.util
import os
import sys

import click

from moetools import __version__
from moetools.errors import EXIT_INTERRUPTED, EXIT_USAGE, MoeError, printable_line

# name -> "module:attribute" of its click command. A module that is not there yet is not listed.
COMMANDS = {
    "inspect": "moetools.inspect_cmd:inspect_command",
    "device-fit": "moetools.devicefit.command:device_fit_command",
    "quantize": "moetools.quantize.command:quantize_command",
    "container-encode": "moetools.container.command:encode_command",
    "container-verify": "moetools.container.command:verify_command",
    "container-read": "moetools.container.command:read_command",
    "cold-twin": "moetools.coldtwin.command:cold_twin_command",
    "trace-tail": "moetools.tracetail.command:trace_tail_command",
    "build-env": "moetools.buildenv.command:build_env_command",
    "host": "moetools.host.command:host_command",
}

# OS errors that mean "bad input path", reported as one line with exit 2.
_OS_ERROR_WORDS = {
    errno.ENOENT: "no such file or folder",
    errno.EACCES: "permission denied",
    errno.EISDIR: "is a folder, not a file",
    errno.ENOTDIR: "not a folder",
    errno.ENOSPC: "no space left on device",
    errno.EROFS: "read-only file system",
}


def _module_exists(module_name):
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:
        return False


def error_line(err):
    """The one line a user sees for an exception, and its exit code."""
    if isinstance(err, MoeError):
        return str(err), err.exit_code
    if isinstance(err, OSError):
        words = _OS_ERROR_WORDS.get(err.errno, err.strerror or str(err))
        # a descriptor-level error carries no name, or the descriptor's number: never print "4: ..."
        target = os.fsdecode(err.filename) if isinstance(err.filename, (str, bytes)) else ""
        if isinstance(err.filename, (str, bytes)) and not target:  # open(""): an empty argument
            return "the path is empty (an empty argument, '', where a file or folder was named)", EXIT_USAGE
        return (f"{target}: {words}" if target else f"{words} (the file was not named: please report it)"), EXIT_USAGE
    return None, None


class _NonEmptyPath(click.Path):
    """click.Path that refuses '' (an unset shell variable, `device-fit "$MODEL"`), which click passes
    on and open() reports with no name."""

    def convert(self, value, param, ctx):
        if isinstance(value, (str, bytes)) and not value:
            self.fail("the path is empty", param, ctx)
        return super().convert(value, param, ctx)


def _refuse_empty_paths(command):
    """`command` with every click.Path parameter refusing an empty path (done once: a type already
    checked is a _NonEmptyPath, not a click.Path)."""
    for param in getattr(command, "params", ()):
        if type(param.type) is click.Path:
            checked = _NonEmptyPath.__new__(_NonEmptyPath)
            checked.__dict__.update(param.type.__dict__)
            param.type = checked
    return command


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx):
        return [name for name, target in COMMANDS.items() if _module_exists(target.split(":")[0])]

    def get_command(self, ctx, cmd_name):
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and (module_name + ".").startswith(err.name + "."):  # the command module is absent
                return None
            raise
        return _refuse_empty_paths(getattr(module, attribute))

    def format_commands(self, ctx, formatter):
        """List every subcommand with its whole first sentence, wrapped, never cut to `...`."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def make_context(self, info_name, args, parent=None, **extra):
        """The root's own options (`moetools --foo`) fail here, before `invoke`: one line too."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as err:
            click.echo(f"error: {printable_line(usage_error_line(err))}", err=True)
            raise click.exceptions.Exit(EXIT_USAGE) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (MoeError, OSError) as err:
            if isinstance(err, BrokenPipeError):
                _quiet_broken_pipe()
            line, code = error_line(err)
            click.echo(f"error: {printable_line(line)}", err=True)
            ctx.exit(code)
        except KeyboardInterrupt:
            # caught here, before click turns it into "Aborted!" with exit 1
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as err:
            # a subcommand's bad option, value or argument, or an unknown command: one line
            where = " ".join(filter(None, [ctx.command_path, ctx.invoked_subcommand]))
            click.echo(f"error: {printable_line(usage_error_line(err, where))}", err=True)
            ctx.exit(EXIT_USAGE)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as err:  # a bug: still one line and exit 2, never a traceback and exit 1
            click.echo(f"error: {internal_error_line(err)}", err=True)
            ctx.exit(EXIT_USAGE)


def usage_error_line(err, command="moetools"):
    """The one line for a click usage error (`missing argument MODEL`, `no such option '--foo'`, a bad
    choice, an unknown command), in place of click's usage block, blank line and `Error:` line.
    `command` names the command when click's error carries no context (an option's missing value)."""
    if err.ctx is not None:
        command = err.ctx.command_path
    subcommand = command.partition(" ")[2]  # the root is `moetools` however it was started (`cli` under CliRunner)
    see = f"see moetools{' ' + subcommand if subcommand else ''} --help"
    if isinstance(err, click.MissingParameter) and err.param is not None:
        if err.param.param_type_name == "argument":
            return f"missing argument {err.param.human_readable_name} ({see})"
        return f"missing option {max(err.param.opts, key=len)} ({see})"
    if isinstance(err, click.BadParameter) and isinstance(getattr(err.param, "type", None), click.Path):
        # a folder where a file is wanted (or the reverse): like every other bad path
        return _path_problem(err)
    if isinstance(err, click.NoSuchOption):
        guesses = ", ".join(sorted(err.possibilities or ()))
        return f"no such option {err.option_name}" + (f" (did you mean {guesses}? {see})" if guesses else f" ({see})")
    message = " ".join(err.format_message().split()).rstrip(".")
    return f"{message[:1].lower()}{message[1:]} ({see})"


def _path_problem(err):
    """`/tmp/x: is a folder, not a file (MODEL)` from click's BadParameter on a click.Path argument."""
    import re

    name = "path"
    if err.param is not None:
        name = (max(err.param.opts, key=len) if err.param.param_type_name == "option" and err.param.opts
                else err.param.human_readable_name)
    match = re.match(r"^(File|Directory|Path) (.+?) (is a directory|is a file|does not exist|is not readable|"
                     r"is not writable)\.?$", err.message)
    if not match:
        return f"{name}: {err.message}"
    path = match[2].strip("'\"\u2018\u2019")
    words = {"is a directory": "is a folder, not a file", "is a file": "is a file, not a folder",
             "does not exist": "no such file or folder", "is not readable": "permission denied",
             "is not writable": "permission denied"}[match[3]]
    return f"{path}: {words} ({name})"


def internal_error_line(err):
    """The line for an exception no code path expected: what it was, where, and what to do."""
    where = ""
    traceback = err.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    if traceback is not None:
        code = traceback.tb_frame.f_code
        where = f" in {os.path.basename(code.co_filename)}:{traceback.tb_lineno} ({code.co_name})"
    message = " ".join(str(err).split())[:300]
    return (f"internal error: {type(err).__name__}{': ' + message if message else ''}{where}; "
            f"this is a moetools bug, please report it with the command line and `moetools --version` ({__version__})")


def _quiet_broken_pipe():
    """`moetools ... | head` closed stdout: exit quietly, as Unix tools do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(0)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="moetools")
def cli():
    """Plan, shrink, re-encode, replicate and measure Mixture-of-Experts models that are bigger than
    the GPU, for llama.cpp and its expert-streaming fork.

    Shell completion (bash): eval "$(_MOETOOLS_COMPLETE=bash_source moetools)"
    """


_EXIT_AT_ONCE = []  # non-empty: a command asked `main` to skip the interpreter's teardown


def exit_at_once():
    """Ask `main` to end this process as soon as the command has returned (its outputs written and
    closed, its threads joined), without the interpreter's teardown: after numba has loaded, freeing
    its thousands of objects and the machine code takes a fifth of a second of CPU, a sixth of a small
    quantize run. Only the real process does this (`main`); a command run in-process (tests) is not affected."""
    _EXIT_AT_ONCE.append(True)


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for the block, back on after it if it was on. For the
    commands whose work makes many objects and no reference cycles (device-fit's graphs, numba's
    import and cache loads under quantize): reference counting frees them, the collector's passes only
    cost CPU."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _exit_now(code):
    """os._exit(code) once stdout and stderr are flushed; returns (for a normal exit) if they cannot be."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def main():
    try:
        cli(prog_name="moetools")
    except BrokenPipeError:
        _quiet_broken_pipe()
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except SystemExit as exit:  # click ends every run with one
        if (_EXIT_AT_ONCE and (exit.code is None or isinstance(exit.code, int))
                and sys.gettrace() is None and sys.getprofile() is None):  # a profiler or coverage writes at exit
            _exit_now(exit.code or 0)
        raise
