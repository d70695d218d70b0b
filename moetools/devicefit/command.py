"""`moetools device-fit MODEL --vram 32G`: which layers and experts go to each device under upstream
llama.cpp, how one GPU's memory divides for the streaming fork, how fast each decodes, and how to
launch it.

    moetools device-fit k3-00001-of-00014.gguf --vram 32G
    moetools device-fit k3.gguf --vram 32G --tiers device-fit/k3 --coverage curve.json --plan k3.plan.json
    moetools trace-tail run.trace --curve --json | moetools device-fit k3.gguf --vram 32G --coverage -
    moetools device-fit k3.gguf --vram 32G --emit env --plan k3.plan.json > serve.sh && sh serve.sh
"""

import functools

import click

from moetools import helptext
from moetools.devicefit.options import (context_options, devices_options, drafting_options, fork_options,
                                         machine_options, outputs_options, placement_options, OrderedCommand)
from moetools.sourceopts import source_options


def _collector_paused(command):
    """Run `command` with Python's cyclic garbage collector off, and let the real process end without
    the interpreter's teardown (cli.exit_at_once). A plan builds and drops graphs of tens of thousands
    of tensors, which hold no reference cycles (reference counting frees them); the collector's passes
    over them, and freeing them one by one at exit, cost a tenth of a large plan's CPU."""
    @functools.wraps(command)
    def paused(*args, **kwargs):
        from moetools.cli import collector_paused, exit_at_once

        exit_at_once()
        with collector_paused():
            return command(*args, **kwargs)
    return paused


@click.command("device-fit", cls=OrderedCommand, epilog=helptext.DEVICE_FIT)
@click.argument("model_path", metavar="MODEL", nargs=-1)
@devices_options
@context_options
@placement_options
@drafting_options
@fork_options
@machine_options
@outputs_options
@click.option("--include", metavar="GLOB", help="With hf://ORG/REPO: plan only the files whose repo path matches GLOB.")
@source_options
@_collector_paused
def device_fit_command(model_path, devices, context, placement, drafting, fork, machine, outputs, fetch):
    """Plan a model on these devices: upstream llama.cpp's layers and experts on every GPU, RPC server and
    the CPU, with the streaming fork's division of one GPU beside it where the fork applies — with the
    speed of each.

    MODEL is a .gguf file or any shard of a split model, an http(s) URL of one, or
    hf://ORG/REPO[@REVISION]/PATH.gguf (headers only, read with range requests). hf://ORG/REPO[@REVISION]
    alone plans every GGUF set in the repo, one row per quant, the fastest that fits first
    (--include GLOB to narrow). Exit 0 when a plan fits (for a repo: when any set does), 1 when it does not (the
    shortfall is reported), 2 for bad input.

    With --check, a whole llama.cpp command line follows `--` (or a FILE or - holds it) and is
    evaluated on the devices given: `device-fit --vram 24G --ram 64G --check -- llama-server -m
    model.gguf -ngl 99 -ot exps=CPU -c 32768`.
    """
    if placement.check:
        from moetools.devicefit.run import device_fit_check  # lazily: --help stays cheap

        return device_fit_check(model_path, devices, context, placement, drafting, fork, machine, outputs, fetch)
    click_context = click.get_current_context()
    argument = next(param for param in click_context.command.params if param.name == "model_path")
    if not model_path:
        raise click.MissingParameter(ctx=click_context, param=argument)
    if len(model_path) > 1:
        raise click.UsageError(f"Got unexpected extra argument{'s' if len(model_path) > 2 else ''} "
                               f"({' '.join(model_path[1:])}); a llama.cpp command line goes after --check --",
                               ctx=click_context)
    if not model_path[0]:  # an unset shell variable: as every other empty path (cli._NonEmptyPath)
        from moetools.errors import UsageError

        raise UsageError("MODEL: the path is empty")
    try:
        click.Path(dir_okay=False).convert(model_path[0], argument, click_context)
    except click.BadParameter as err:  # a folder: one line, exit 2, as for any MODEL argument
        from moetools.cli import _path_problem
        from moetools.errors import UsageError

        raise UsageError(_path_problem(err)) from None
    from moetools.devicefit.run import device_fit  # lazily: --help stays cheap

    return device_fit(model_path[0], devices, context, placement, drafting, fork, machine, outputs, fetch)
