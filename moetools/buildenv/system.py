"""The machine build-env looks at, made injectable: environment, filesystem root, command runner.

Every probe in this package reads the environment through `System.env`, touches files through
`System.real(path)` and runs programs through `System.run(argv)`, so tests can build Linux and
Windows toolkit trees in a temporary folder and answer for vswhere, nvidia-smi and nvcc without a
GPU or a real CUDA install.

Paths are kept as strings in the *target* platform's syntax ("virtual" paths: `/usr/local/cuda`,
`C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4`), because those are what a user
reads and what the printed environment must contain. `real()` maps one onto the folder that holds
it here: the path itself on a real machine, `<root>/usr/local/cuda` or `<root>/C:/Program Files/...`
under a test root.
"""

import ntpath
import os
import posixpath
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RunResult:
    """What a program answered: exit code and decoded output."""

    returncode: int
    stdout: str = ""
    stderr: str = ""


def subprocess_runner(argv, timeout=30.0):
    """Run `argv` (a list, or on Windows a command line string) for real. None when the program cannot be started (missing, not executable)."""
    try:
        done = subprocess.run(
            argv if isinstance(argv, str) else list(argv), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, ValueError):
        return None
    except subprocess.TimeoutExpired:
        return RunResult(124, "", f"timed out after {timeout:g} s")
    return RunResult(
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


@dataclass
class System:
    """An injectable view of one machine.

    env: environment variables (name -> value). root: None for the real filesystem, else a folder
    standing for `/` (Linux) or holding drive folders such as `C:` (Windows). run: callable
    (argv list, timeout seconds) -> RunResult, or None when the program cannot be started.
    platform: "linux" or "windows" (the target layout, independent of the machine running tests).
    """

    env: dict = field(default_factory=dict)
    root: Path = None
    run: object = subprocess_runner
    platform: str = "linux"

    @classmethod
    def current(cls):
        """This machine, as it is."""
        return cls(env=dict(os.environ), root=None, run=subprocess_runner,
                   platform="windows" if sys.platform.startswith("win") else "linux")

    @property
    def windows(self):
        return self.platform == "windows"

    @property
    def pathmod(self):
        """ntpath or posixpath: joins and splits in the target platform's syntax."""
        return ntpath if self.windows else posixpath

    @property
    def list_sep(self):
        return ";" if self.windows else ":"

    def join(self, *parts):
        return self.pathmod.join(*parts)

    def real(self, vpath):
        """The local Path that holds the virtual path `vpath`."""
        if self.root is None:
            return Path(vpath)
        if self.windows:
            drive, rest = ntpath.splitdrive(ntpath.normpath(vpath))
            parts = [p for p in rest.replace("\\", "/").split("/") if p]
            return Path(self.root, drive or "C:", *parts)
        return Path(self.root, *[p for p in posixpath.normpath(vpath).split("/") if p])

    def resolve(self, vpath):
        """`vpath` with symlinks resolved, as a virtual path (a link outside the root stays as is)."""
        real = self.real(vpath)
        try:
            resolved = real.resolve()
        except OSError:
            return vpath
        if self.root is None:
            return str(resolved)
        root = Path(self.root).resolve()
        try:
            resolved.relative_to(root)
        except ValueError:
            return vpath
        parts = resolved.relative_to(root).parts
        if self.windows:
            return (parts[0] + "\\" + "\\".join(parts[1:])) if parts else "C:\\"
        return "/" + "/".join(parts)

    def is_file(self, vpath):
        return self.real(vpath).is_file()

    def is_dir(self, vpath):
        return self.real(vpath).is_dir()

    def exists(self, vpath):
        return self.real(vpath).exists()

    def listdir(self, vpath):
        """Names in a folder, sorted; [] when it is not a readable folder."""
        try:
            return sorted(os.listdir(self.real(vpath)))
        except OSError:
            return []

    def read_text(self, vpath, limit=1 << 20):
        """A small text file's content (first `limit` bytes), or None when unreadable."""
        try:
            with open(self.real(vpath), "rb") as handle:
                return handle.read(limit).decode("utf-8", "replace")
        except OSError:
            return None

    def getenv(self, name, default=None):
        """An environment variable; case-insensitive on Windows (`Path` is `PATH` there)."""
        if name in self.env:
            return self.env[name]
        if self.windows:
            for key, value in self.env.items():
                if key.upper() == name.upper():
                    return value
        return default

    def path_dirs(self):
        """The folders of PATH, in order, empty entries dropped."""
        return [d for d in (self.getenv("PATH") or "").split(self.list_sep) if d]

    def exe_names(self, name):
        if not self.windows or name.lower().endswith(".exe"):
            return [name]
        return [name + ".exe", name + ".bat", name + ".cmd"]

    def which(self, name, dirs=None):
        """First `name` (with .exe on Windows) among `dirs` (default PATH), as a virtual path."""
        for folder in self.path_dirs() if dirs is None else dirs:
            for exe in self.exe_names(name):
                candidate = self.join(folder, exe)
                real = self.real(candidate)
                if real.is_file() and (self.windows or os.access(real, os.X_OK)):
                    return candidate
        return None

    def call(self, argv, timeout=30.0):
        """Run a program (argv[0] a virtual path or a bare name). None if it cannot be started.

        The real runner gets the path as is; a test runner answers by virtual path.
        """
        return self.run(argv if isinstance(argv, str) else list(argv), timeout)
