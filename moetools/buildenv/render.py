"""Render a build-env Report: as a script for sh, cmd or PowerShell, a CMake initial-cache file,
a JSON document, or the check table. Pure string building; the command prints."""

from moetools.output import Table


def sh_quote(value):
    """POSIX single quotes: everything literal, a ' written as '\\''."""
    return "'" + value.replace("'", "'\\''") + "'"


def ps_quote(value):
    """PowerShell single-quoted (verbatim) string: a ' doubled."""
    return "'" + value.replace("'", "''") + "'"


def cmd_escape(value):
    """A value for `set "NAME=value"` in a .bat file.

    `%` is doubled (batch files expand %...%). Inside the outer quotes cmd's metacharacters are
    literal, but each `"` in the value toggles quoting, so in the stretches it leaves unquoted
    `^ & | < > ( )` get a caret.
    """
    out = []
    quoted = True  # we are inside set "...
    for char in value:
        if char == "%":
            out.append("%%")
            continue
        if char == '"':
            quoted = not quoted
        elif not quoted and char in "^&|<>()":
            out.append("^")
        out.append(char)
    return "".join(out)


def cmake_quote(value):
    """A CMake quoted argument: backslash, quote and `$` escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _header(report):
    tk = report.chosen
    lines = ["moetools build-env: " + (f"CUDA {tk.version} at {tk.path}" if tk else "no complete CUDA toolkit")]
    if tk and report.cmake_pick_reason and report.cmake_pick != tk.path:
        lines.append(f"CMake alone would pick {report.cmake_pick or 'nothing'} ({report.cmake_pick_reason})")
    if report.architectures:
        lines.append(f"architectures from {report.architectures_source}")
    for finding in report.findings:
        if finding.status == "fail":
            lines.append(f"PROBLEM {finding.item}: {finding.detail}")
    return lines


def failure_reason(report):
    """One line saying why the build would fail, or None when it would not."""
    if not report.fails:
        return None
    problems = [f"{f.item}: {f.detail}" for f in report.findings if f.status == "fail"]
    return "moetools build-env: the build would fail: " + ("; ".join(problems) or "see --check")


def render_sh(report, system):
    lines = [f"# {line}" for line in _header(report)]
    for name, value in report.env.items():
        lines.append(f"export {name}={sh_quote(value)}")
    if report.path_prepend:
        joined = ":".join(report.path_prepend) if not system.windows else ";".join(report.path_prepend)
        sep = system.list_sep
        lines.append(f'export PATH={sh_quote(joined)}"${{PATH:+{sep}$PATH}}"')
    reason = failure_reason(report)
    if reason:
        # The last command decides the status of `eval "$(moetools build-env)"`: make it fail, with the
        # reason on stderr, instead of exiting the user's shell.
        lines.append(f"printf '%s\\n' {sh_quote(reason)} >&2")
        lines.append("false")
    return "\n".join(lines) + "\n"


def render_cmd(report, system):
    lines = ["@echo off"] + [f"rem {cmd_escape(line)}" for line in _header(report)]
    for name, value in report.env.items():
        lines.append(f'set "{name}={cmd_escape(value)}"')
    if report.path_prepend:
        lines.append(f'set "PATH={cmd_escape(";".join(report.path_prepend))};%PATH%"')
    reason = failure_reason(report)
    if reason:
        lines.append(f"echo {cmd_escape(reason).replace('^', '^^')} 1>&2")
        lines.append("exit /b 1")
    # "\n": on Windows the text-mode stdout writes CRLF itself (a literal \r\n would become \r\r\n).
    return "\n".join(lines) + "\n"


def render_ps1(report, system):
    lines = [f"# {line}" for line in _header(report)]
    for name, value in report.env.items():
        lines.append(f"$env:{name} = {ps_quote(value)}")
    if report.path_prepend:
        sep = system.list_sep
        lines.append(f"$env:PATH = {ps_quote(sep.join(report.path_prepend) + sep)} + $env:PATH")
    reason = failure_reason(report)
    if reason:
        lines.append(f"throw {ps_quote(reason)}")
    return "\n".join(lines) + "\n"


def render_cmake(report, system):
    """An initial-cache script for `cmake -C FILE`: the -D settings of CMAKE_ARGS."""
    from moetools.buildenv.core import cmake_definitions

    lines = [f"# {line}" for line in _header(report)]
    lines.append("# use: cmake -C THIS_FILE -G Ninja -B build   (the generator cannot be set from a cache file)")
    if system.windows:
        lines.append("# run it where the MSVC environment (INCLUDE, LIB, PATH) is set: --shell cmd or ps1 gives it")
    for name, kind, value in cmake_definitions(report, system):
        if kind in ("PATH", "FILEPATH") and system.windows:
            value = value.replace("\\", "/")
        lines.append(f'set({name} {cmake_quote(value)} CACHE {kind} "set by moetools build-env")')
    reason = failure_reason(report)
    if reason:
        lines.append(f"message(FATAL_ERROR {cmake_quote(reason)})")
    return "\n".join(lines) + "\n"


def json_document(report, system):
    """The --shell json document (also --check --json)."""
    tk = report.chosen
    env = dict(report.env)
    if report.path_prepend:
        current = system.getenv("PATH") or ""
        env["PATH"] = system.list_sep.join(report.path_prepend + ([current] if current else []))
    gpus = report.gpus
    return {
        "ok": not report.fails,
        "platform": report.platform,
        "cuda_path": tk.path if tk else None,
        "cuda_version": tk.version if tk else None,
        "toolkits": [t.to_json() for t in report.toolkits],
        "cmake_pick": report.cmake_pick,
        "cmake_pick_reason": report.cmake_pick_reason,
        "host_compiler": report.compiler.to_json() if report.compiler else None,
        "host_compilers": [c.to_json() for c in report.compilers],
        "cmake": report.cmake.to_json() if report.cmake else None,
        "ninja": report.ninja.to_json() if report.ninja else None,
        "windows_sdk_bin": report.sdk_bin,
        "gpus": [{"name": g.name, "compute_cap": g.compute_cap, "driver": g.driver}
                 for g in (gpus.gpus if gpus else [])],
        "gpu_problem": gpus.problem if gpus else None,
        "driver": gpus.driver if gpus else None,
        "architectures": list(report.architectures),
        "architectures_source": report.architectures_source,
        "env": env,
        "path_prepend": list(report.path_prepend),
        "problems": [f.to_json() for f in report.problems],
        "findings": [f.to_json() for f in report.findings],
    }


def render_script(report, system, shell):
    """The text for --shell sh|cmd|ps1|cmake."""
    return {"sh": render_sh, "cmd": render_cmd, "ps1": render_ps1, "cmake": render_cmake}[shell](report, system)


def check_table(report):
    rows = [[f.item, f.status.upper(), f.detail, f.fix] for f in report.findings]
    verdict = "the build would fail" if report.fails else "ready to build"
    return Table(title=f"build-env check: {verdict}", columns=["item", "status", "finding", "fix"], rows=rows)

