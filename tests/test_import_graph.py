"""The import rules of the whole tree (bpe_ops, schemas, pipelines), read with `ast` (function-level
imports included): layers import only downwards, bpe_ops stays pure, no import circle anywhere, and no
command module imports another. `pytest -s` prints each module's floor: its longest import chain.

Layers, bottom up: bpe_ops (pure BPE), schemas (the file layouts), the pipelines services, the command
modules (the ones pipelines/cli.py's table names), cli. Inside pipelines the services live in rooms
(subpackages) that stand on three floors, and the entry points (the commands, cli and train's counting
process) on the fourth, side by side:

    4  the entry points: train, tokenize, pack, evaluate, drift, stats, estimate, encode; cli; count_process
    3  monitoring (drift judging, reports, alerts)   steps (each command's own Beam steps)
    2  datasets (readers, shards, tokenizer files)  statistics (summaries and their breakdowns)
    1  core (the command frame, errors, file access)
"""
import ast

import pytest

from pipelines.cli import COMMAND_MODULES
from tests.conftest import ROOT

PACKAGES = ("bpe_ops", "schemas", "pipelines")
COMMANDS = set(COMMAND_MODULES.values())
LAYERS = ("bpe_ops", "schemas", "services", "commands", "cli")
ROOM_FLOORS = {"core": 1, "datasets": 2, "statistics": 2, "monitoring": 3, "steps": 3}
ENTRY_FLOOR = 4
IMPURE = ("apache_beam", "fsspec", "pipelines", "schemas")     # what bpe_ops must never import


def module_names() -> dict[str, object]:
    """Every module of the tree -> its file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
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
    assert found["pipelines.cli"] > found["pipelines.core.command"] > found["pipelines.core.errors"]


def room(name: str) -> str:
    """The room of a pipelines module: its subpackage, or "entry" for a module of pipelines itself.

    >>> room("pipelines.core.files"), room("pipelines.tokenize"), room("pipelines")
    ('core', 'entry', 'entry')
    """
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or parts[1:] and parts[1] in ROOM_FLOORS else "entry"


def room_floor(name: str) -> int:
    return ROOM_FLOORS.get(room(name), ENTRY_FLOOR)


def test_the_rooms_of_pipelines_stand_on_four_floors():
    """A module imports within its own room or from a room on a lower floor; every subpackage has a
    floor; and the entry points (the commands, side by side) stand over all of them."""
    pipelines = [name for name in MODULES if name.partition(".")[0] == "pipelines"]
    assert {room(name) for name in pipelines} == set(ROOM_FLOORS) | {"entry"}
    wrong = sorted(f"{name} ({room(name)}, floor {room_floor(name)}) imports {dep} ({room(dep)}, floor {room_floor(dep)})"
                   for name in pipelines for dep in GRAPH[name]
                   if dep.startswith("pipelines") and room(dep) != room(name) and room_floor(dep) >= room_floor(name))
    assert not wrong, "\n".join(wrong)
    assert {room(name) for name in COMMANDS | {"pipelines.cli", "pipelines.count_process"}} == {"entry"}


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
    assert "pipelines.datasets.sources" in GRAPH["pipelines.tokenize"]            # inside functions only
    assert "bpe_ops" not in GRAPH["bpe_ops.pretokenize"]                 # from . import _native (compiled)


@pytest.mark.parametrize("name, dep", [("bpe_ops.hf_components", "bpe_ops.pretokenize"),
                                       ("pipelines.evaluate", "pipelines.tokenize"),
                                       ("pipelines.pack", "pipelines.tokenize"),
                                       ("pipelines.steps.train_count", "pipelines.train")])
def test_a_module_no_longer_imports_what_it_shares_through_a_service(name, dep):
    """Imports that once made a circle or crossed between commands, each now through a room of its own
    (bpe_ops/patterns.py, tokenizer_files.py, outcome.py, train_options.py)."""
    assert dep not in GRAPH[name]
