"""Run a command with its stderr (or stdout and stderr) on a real pseudo-terminal (POSIX only: callers skip
elsewhere)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _read_all(leader):
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command closed its end
            break
        if not chunk:
            break
        seen += chunk
    return seen


def run_on_terminal(args, columns=80, stdout_too=False, env=None):
    """(exit code, everything `moetools ARGS` wrote to its terminal) with stderr on a terminal and stdout
    in a pipe, or with both on the terminal (`stdout_too`: what a user sees, tables and all; the pty's
    `\\r\\n` line ends read back as `\\n`). The terminal is `columns`x24, as a real one is: a fresh pty is
    0x0 and tqdm draws nothing in 0 columns. COLUMNS/LINES are removed from the environment, so the
    command finds its width on the terminal."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    environment = {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")}
    environment.update(env or {})
    try:
        process = subprocess.Popen([sys.executable, "-m", "moetools", *map(str, args)], cwd=ROOT,
                                   stdout=follower if stdout_too else subprocess.PIPE, stderr=follower,
                                   stdin=subprocess.DEVNULL, env=environment)
        os.close(follower)
        follower = None
        seen = _read_all(leader)
        if not stdout_too:
            process.stdout.read()
        process.wait(timeout=120)
        text = seen.decode("utf-8", "replace")
        return process.returncode, text.replace("\r\n", "\n") if stdout_too else text
    finally:
        os.close(leader)
        if follower is not None:
            os.close(follower)
