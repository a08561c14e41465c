"""The import rules of the whole tree (bpe_ops, schemas, pipelines), read with `ast` (function-level
imports included): layers import only downwards, bpe_ops stays pure, no import circle anywhere, and no
command module imports another. `pytest -s` prints each module's floor: its longest import chain.

Layers, bottom up: bpe_ops (pure BPE), schemas (the file layouts), the pipelines services, the command
modules (the ones pipelines/cli.py's table names), cli."""
import ast

import pytest

from pipelines.cli import COMMAND_MODULES
from tests.conftest import ROOT

PACKAGES = ("bpe_ops", "schemas", "pipelines")
COMMANDS = set(COMMAND_MODULES.values())
LAYERS = ("bpe_ops", "schemas", "services", "commands", "cli")
IMPURE = ("apache_beam", "fsspec", "pipelines", "schemas")     # what bpe_ops must never import


def module_names() -> dict[str, object]:
    """Every module of the tree -> its file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


MODULES = module_names()


def imported_by(name: str) -> set[str]:
    """Every module name `name` imports (of the tree or not), with `from X import Y` read as the module
    X.Y when there is one."""
    package = name if MODULES[name].stem == "__init__" else name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(filter(None, [package, node.module]))
            names |= {f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base for alias in node.names}
    return names - {name}


def is_module(dotted: str) -> bool:
    """Whether a dotted name of the tree is a module (Python or compiled) rather than a name in one."""
    path = ROOT.joinpath(*dotted.split("."))
    return dotted in MODULES or any(path.parent.glob(f"{path.name}.*.so")) or path.is_dir()


GRAPH = {name: {m for m in imported_by(name) if m in MODULES} for name in MODULES}


def layer(name: str) -> int:
    if name == "pipelines.cli":
        return LAYERS.index("cli")
    if name in COMMANDS:
        return LAYERS.index("commands")
    return LAYERS.index("services" if name.startswith("pipelines") else name.partition(".")[0])


def cycles() -> list[list[str]]:
    """One import circle through each module that is on one (depth-first, in name order)."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == "open":
                found.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    return found


def floors() -> dict[str, int]:
    """Each module's longest chain of imports down to a module that imports none of the tree (cut at a
    circle, which `test_no_import_circle_anywhere` reports)."""
    memo: dict[str, int] = {}

    def floor(name: str, seen: frozenset) -> int:
        if name not in memo:
            below = [floor(dep, seen | {name}) for dep in GRAPH[name] if dep not in seen | {name}]
            memo[name] = 1 + max(below) if below else 0
        return memo[name]

    return {name: floor(name, frozenset()) for name in GRAPH}


def test_the_floors_of_every_module_are_printed_with_s(capsys):
    found = floors()
    with capsys.disabled():
        print("\nimport floors (longest chain of imports below each module):")
        for name in sorted(found, key=lambda n: (found[n], n)):
            print(f"  {found[name]:2d}  {LAYERS[layer(name)]:9s} {name}")
    assert found["pipelines.cli"] > found["pipelines.command"] > found["pipelines.errors"]


def test_the_commands_of_the_cli_table_are_modules_of_the_tree():
    assert COMMANDS <= set(MODULES), COMMANDS - set(MODULES)


def test_layers_import_only_downwards():
    upward = sorted(f"{name} ({LAYERS[layer(name)]}) imports {dep} ({LAYERS[layer(dep)]})"
                    for name in GRAPH for dep in GRAPH[name] if layer(dep) > layer(name))
    assert not upward, "\n".join(upward)


def test_bpe_ops_is_pure():
    """No Beam, no fsspec, nothing of the layers above, no environment read."""
    impure = []
    for name in (m for m in MODULES if m.partition(".")[0] == "bpe_ops"):
        impure += [f"{name} imports {m}" for m in imported_by(name) if m.partition(".")[0] in IMPURE]
        tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
        impure += [f"{name} reads the environment (line {node.lineno})" for node in ast.walk(tree)
                   if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb")]
    assert not impure, "\n".join(impure)


def test_no_import_circle_anywhere():
    found = cycles()
    assert not found, "\n".join(" -> ".join(cycle) for cycle in found)


def test_no_command_module_imports_another_command_module():
    crossing = sorted(f"{name} imports {dep}" for name in COMMANDS for dep in GRAPH[name] if dep in COMMANDS)
    assert not crossing, "\n".join(crossing)


def test_the_reader_sees_relative_and_function_level_imports():
    assert "bpe_ops.patterns" in GRAPH["bpe_ops.hf_components"]          # from .patterns import ...
    assert "pipelines.sources" in GRAPH["pipelines.tokenize"]            # inside functions only
    assert "bpe_ops" not in GRAPH["bpe_ops.pretokenize"]                 # from . import _native (compiled)


@pytest.mark.parametrize("name, dep", [("bpe_ops.hf_components", "bpe_ops.pretokenize"),
                                       ("pipelines.evaluate", "pipelines.tokenize"),
                                       ("pipelines.pack", "pipelines.tokenize"),
                                       ("pipelines.train_count", "pipelines.train")])
def test_a_module_no_longer_imports_what_it_shares_through_a_service(name, dep):
    """Imports that once made a circle or crossed between commands, each now through a room of its own
    (bpe_ops/patterns.py, tokenizer_files.py, outcome.py, train_options.py)."""
    assert dep not in GRAPH[name]
