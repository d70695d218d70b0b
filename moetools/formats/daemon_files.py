"""The serving daemon's per-port files, found as the daemon finds them, and the one moetools never writes.

The rules are the daemon's (CambrianTech/continuum core/continuum-core/src/inference/llama_server.rs
`moe_glass_box_paths(port)`), restated, not copied:
- one folder, `<home>/.continuum/logs/` (beside the per-port `llama-server-{port}.log`), holds
  `moe-capture-{port}.jsonl` (the fork's per-token capture, `GGML_MOE_CAPTURE_FILE`),
  `moe-plan-{port}.json` (the plan, `GGML_MOE_PLAN_FILE`) and `moe-trace-{port}.bin` (the fork's
  12-byte trace, which the daemon tails every tick);
- home is Rust's `dirs::home_dir()`: `$HOME` when set and not empty, else the password database's
  home (on Windows the profile folder, `%USERPROFILE%`). The storage root
  (`CONTINUUM_STORAGE_PATH`) does not move this folder: the daemon does not read it here.

The daemon rewrites `moe-plan-{port}.json` on every tick that moves a budget or a pin
(core/continuum-core/src/modules/serving_daemon.rs `publish_moe_host_cache_lease`: a new
`PlanFileDocument::new(...)` written whole by `plan_file::write_plan_file`, with no read of the
old file, no merge and no lock), so anything another writer put there is lost within a tick and a
read-modify-write could interleave with it. moetools therefore never writes that file: a plan it
would write there goes to `moetools-plan-{port}.json` in the same folder (`own_plan_path`).
"""

import os
import re

LOGS_FOLDER = (".continuum", "logs")
CAPTURE = "moe-capture-{port}.jsonl"
PLAN = "moe-plan-{port}.json"
TRACE = "moe-trace-{port}.bin"
OWN_PLAN = "moetools-plan-{port}.json"
DAEMON_PLAN_NAME = re.compile(r"moe-plan-(\d+)\.json\Z")
WHY_NOT_DAEMON_PLAN = "the daemon rewrites it every tick without merge or lock"


def daemon_home(env=None):
    """Rust's `dirs::home_dir()`: $HOME when set and not empty, else the password database (on
    Windows, %USERPROFILE%). None when there is none."""
    env = os.environ if env is None else env
    if os.name == "nt":
        return env.get("USERPROFILE") or None
    home = env.get("HOME")
    if home:
        return home
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir or None
    except (ImportError, KeyError, OSError):
        return None


def logs_dir(env=None):
    """`<home>/.continuum/logs`, the folder of every per-port file; None without a home."""
    home = daemon_home(env)
    return os.path.join(home, *LOGS_FOLDER) if home else None


class PortFiles:
    """The daemon's three files for one port (paths; they need not exist)."""

    def __init__(self, port, folder):
        self.port = port
        self.folder = folder
        self.capture = os.path.join(folder, CAPTURE.format(port=port))
        self.plan = os.path.join(folder, PLAN.format(port=port))
        self.trace = os.path.join(folder, TRACE.format(port=port))
        self.own_plan = os.path.join(folder, OWN_PLAN.format(port=port))

    def existing(self):
        """The daemon's files for this port that exist now, in (plan, trace, capture) order."""
        return [path for path in (self.plan, self.trace, self.capture) if os.path.exists(path)]

    def to_doc(self):
        return {"port": self.port, "folder": self.folder, "plan": self.plan, "trace": self.trace,
                "capture": self.capture, "moetools_plan": self.own_plan,
                "found": [os.path.basename(path) for path in self.existing()]}


def port_files(port, env=None):
    """The daemon's files for `port`, as `moe_glass_box_paths(port)` derives them; None without a home."""
    folder = logs_dir(env)
    return PortFiles(int(port), folder) if folder else None


def missing_message(port, folder, needed=None):
    """The one line for --port N when the daemon's files are not there."""
    if folder is None:
        return f"--port {port}: no home folder ($HOME) to find the serving daemon's files in (it keeps them in ~/.continuum/logs)"
    names = [os.path.basename(path) for path in needed] if needed else [
        PLAN.format(port=port), TRACE.format(port=port), CAPTURE.format(port=port)]
    return f"--port {port}: no serving-daemon files for port {port} in {folder} (looked for {', '.join(names)})"


def daemon_plan_port(path, env=None):
    """The port whose daemon plan `path` is (`<logs>/moe-plan-{port}.json`, reached by any path or
    link), else None."""
    folder = logs_dir(env)
    if folder is None or not path or path == "-":
        return None
    real_folder = os.path.realpath(folder)
    for candidate in (os.path.abspath(os.fspath(path)), os.path.realpath(os.fspath(path))):
        match = DAEMON_PLAN_NAME.match(os.path.basename(candidate))
        if match and os.path.realpath(os.path.dirname(candidate)) == real_folder:
            return int(match.group(1))
    return None


def own_plan_instead(path, env=None):
    """(the plan path moetools writes, warning or None): a path that is the daemon's plan file
    becomes `moetools-plan-{port}.json` beside it, with the one-line reason."""
    port = daemon_plan_port(path, env)
    if port is None:
        return path, None
    own = PortFiles(port, logs_dir(env)).own_plan
    return own, (f"not writing the serving daemon's plan {path} ({WHY_NOT_DAEMON_PLAN}); "
                 f"moetools' plan goes to {own} instead")
