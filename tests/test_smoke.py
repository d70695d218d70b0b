from click.testing import CliRunner

from moetools.cli import cli


def test_every_architecture_inspects(tiny_models):
    for arch, path in tiny_models.items():
        result = CliRunner().invoke(cli, ["inspect", str(path), "--json"], catch_exceptions=False)
        assert result.exit_code == 0, (arch, result.output)
