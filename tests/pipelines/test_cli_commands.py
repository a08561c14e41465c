"""`tokenbeam NAME` and `python -m pipelines.MODULE` are one command line: both build their parser from
the `COMMAND` the module declares, and `tokenbeam --help` lists every command of the table."""
import pytest

from pipelines import cli

from pipelines.core import command

pytestmark = pytest.mark.slow


def help_of(parser) -> str:
    return parser.format_help()


def test_the_overview_lists_every_command_with_its_help_line(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    listing = capsys.readouterr().out
    for name in cli.COMMAND_MODULES:
        declared = cli.load_command(name)
        assert declared.name == name
        first_words = declared.help.replace("%%", "%").split()[:3]
        assert f"    {name}  " in listing or f"    {name}\n" in listing, name
        assert " ".join(first_words) in " ".join(listing.split()), name


@pytest.mark.parametrize("name", list(cli.COMMAND_MODULES))
def test_a_command_has_the_same_help_as_tokenbeam_and_as_its_module(name):
    _, commands, subparsers = cli.build_parser([name])
    standalone = command.build_parser(cli.load_command(name))
    assert help_of(subparsers[name]) == help_of(standalone)
    assert help_of(standalone).startswith(f"usage: tokenbeam {name}")


@pytest.mark.parametrize("name", list(cli.COMMAND_MODULES))
def test_a_misspelt_flag_gets_the_same_line_from_tokenbeam_and_from_the_module(name, capsys):
    module_main = __import__(cli.COMMAND_MODULES[name], fromlist=["main"]).main
    assert cli.main([name, "--no-such-flag"]) == 2
    through_cli = capsys.readouterr().err
    assert module_main(["--no-such-flag"]) == 2
    assert capsys.readouterr().err == through_cli
    assert through_cli.startswith("tokenbeam: error: unknown option --no-such-flag")


def test_only_the_command_named_is_described_so_a_run_imports_one_module():
    assert cli.commands_described(["train", "--output", "o"]) == ["train"]
    assert cli.commands_described(["--version"]) == []
    assert cli.commands_described([]) == list(cli.COMMAND_MODULES)
