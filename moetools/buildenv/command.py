"""`moetools build-env`: the environment a CUDA build of llama.cpp needs, found and printed.

Examples:
    eval "$(moetools build-env)"                   # sh/bash/zsh: set it in this shell
    moetools build-env --shell cmd > cuda.bat && call cuda.bat
    moetools build-env --shell ps1 | Invoke-Expression
    moetools build-env --check                     # table of findings, exit 1 if the build would fail
    moetools build-env --shell json --arch 8.9 --search-path /opt/cuda-12.8
"""

import os

import click

from moetools import helptext
from moetools import output
from moetools.errors import UsageError

SHELL_CHOICES = ("sh", "cmd", "ps1", "json", "cmake")


@click.command("build-env", epilog=helptext.BUILD_ENV)
@click.option("--shell", "shell", type=click.Choice(SHELL_CHOICES),
              help="Output format: sh (default; cmd on Windows), cmd, ps1, json, or cmake (a `cmake -C` "
                   "initial-cache file).")
@click.option("--check", is_flag=True, help="Print a table of every finding with a fix; exit 1 if the build would fail.")
@click.option("--json", "json_flag", is_flag=True,
              help="JSON: the same as --shell json; with --check, JSON instead of the table (also when piped).")
@click.option("--search-path", "search_paths", multiple=True, metavar="DIR",
              help="Also search DIR: a toolkit itself or a folder holding toolkits (repeatable).")
@click.option("--no-default-search", is_flag=True,
              help="Search only --search-path folders (ignore CUDA_PATH, CUDA_HOME, PATH and the standard folders).")
@click.option("--arch", "arch", multiple=True, metavar="LIST",
              help="GPU architectures to build for (8.6, 86, 89-real, 120a; comma separated or repeated) "
                   "instead of the GPUs nvidia-smi reports.")
@click.option("--allow-unsupported-compiler", is_flag=True,
              help="Accept a host compiler the toolkit rejects, passing nvcc -allow-unsupported-compiler "
                   "(at the risk of compile errors or wrong code).")
@click.pass_context
def build_env_command(ctx, shell, check, json_flag, search_paths, no_default_search, arch,
                      allow_unsupported_compiler):
    """Find the CUDA toolkit, host compiler, cmake, Ninja, GPU architectures (and on Windows the
    MSVC environment and SDK tools) a CUDA build of llama.cpp needs, and print the environment.

    Exit codes: 0 ready to build, 1 the build would fail (the output says why and how to fix it),
    2 bad options.
    """
    from moetools.buildenv.core import analyse
    from moetools.buildenv.render import check_table, json_document, render_script
    from moetools.buildenv.system import System

    system = ctx.find_object(System) or System.current()
    folders = []
    for folder in search_paths:
        if system.root is None:
            folder = os.path.abspath(folder)
        if not system.is_dir(folder):
            raise UsageError(f"--search-path {folder}: not a folder")
        folders.append(folder)
    if no_default_search and not folders:
        raise UsageError("--no-default-search needs at least one --search-path")
    report = analyse(system, folders, default_search=not no_default_search, arch=arch,
                     allow_unsupported=allow_unsupported_compiler)
    if json_flag:
        shell = "json"
    if check:
        output.render(json_document(report, system), [check_table(report)], shell == "json")
    else:
        shell = shell or ("cmd" if system.windows else "sh")
        if shell == "json":
            output.print_json(json_document(report, system))
        else:
            for finding in report.problems:
                fix = f" (fix: {finding.fix})" if finding.fix else ""
                output.warn(f"{finding.item}: {finding.detail}{fix}")
            click.echo(render_script(report, system, shell), nl=False)
    if report.fails:
        ctx.exit(1)
