"""device-fit's orchestration (moetools/devicefit/run.py) called directly, without CliRunner: the option
records built from the command's own defaults give the same plan as the command line."""

import json

import click
from click.testing import CliRunner

from moetools.cli import cli
from moetools.devicefit import options, run
from moetools.devicefit.command import device_fit_command
from moetools.gguf.locator import FetchSettings


def records(**given):
    """The option records device_fit_command would receive for these options (the rest at their defaults)."""
    ctx = click.Context(device_fit_command)
    values = {}
    for param in device_fit_command.params:
        if isinstance(param, click.Option):
            default = param.get_default(ctx)
            unset = default is None or type(default).__name__ == "Sentinel"  # click >= 8.2 marks "no default" so
            values[param.name] = (() if param.multiple else None) if unset else param.type_cast_value(ctx, default)
    values.update(given)
    return {group: record(*(values[name] for name in record._fields)) for group, record in options.GROUPS.items()}


def test_run_gives_the_command_lines_plan(preset_model, capsys):
    model = str(preset_model("qwen3-30b-a3b"))
    argv = ["device-fit", model, "--vram", "24G", "--runtime", "llama", "--ram", "64G", "--json"]
    expected = json.loads(CliRunner().invoke(cli, argv, catch_exceptions=False).stdout)
    capsys.readouterr()
    with click.Context(device_fit_command):
        run.device_fit(model, **records(vram="24G", runtime="llama", ram="64G", json_flag=True), fetch=FetchSettings())
    assert json.loads(capsys.readouterr().out) == expected


def test_run_of_the_fork_runtime(preset_model, capsys):
    model = str(preset_model("qwen3-30b-a3b"))
    expected = json.loads(CliRunner().invoke(cli, ["device-fit", model, "--vram", "16G", "--json"], catch_exceptions=False).stdout)
    capsys.readouterr()
    with click.Context(device_fit_command):
        run.device_fit(model, **records(vram="16G", json_flag=True), fetch=FetchSettings())
    assert json.loads(capsys.readouterr().out) == expected
