"""Run a command with its stderr on a real pseudo-terminal (POSIX only: callers skip elsewhere)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_on_terminal(args):
    """(exit code, everything `moetools ARGS` wrote to its terminal stderr) with stdout in a pipe.
    The terminal is 80x24, as a real one is: a fresh pty is 0x0 and tqdm draws nothing in 0 columns."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        process = subprocess.Popen([sys.executable, "-m", "moetools", *map(str, args)], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL)
        os.close(follower)
        follower = None
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command closed its end
                break
            if not chunk:
                break
            seen += chunk
        process.stdout.read()
        process.wait(timeout=120)
        return process.returncode, seen.decode("utf-8", "replace")
    finally:
        os.close(leader)
        if follower is not None:
            os.close(follower)
