"""The flag a user probably meant by a misspelt one, and the error that names it: shared by the command
line's parser (pipelines/core/command.py) and the sorting of Beam's flags (pipelines/core/beam_options.py)."""
from __future__ import annotations

import difflib

from pipelines.core.errors import UserError


def closest_option(name: str, tool_options: list[str], other_options: list[str] = ()) -> str | None:
    """The option the user probably meant: the tool's flag spelled with dashes (`--min_count` ->
    `--min-count`), Beam's spelled with underscores (`--temp-location` -> `--temp_location`), else
    the one tool flag it abbreviates (`--vocab` -> `--vocab-size`; flags are never abbreviated), else
    the closest by spelling."""
    if name.replace("_", "-") in tool_options:
        return name.replace("_", "-")
    if name.replace("-", "_") in other_options:
        return name.replace("-", "_")
    longer = [option for option in tool_options if option.startswith(name.replace("_", "-"))]
    if len(longer) == 1:
        return longer[0]
    close = difflib.get_close_matches(name, list(tool_options) + list(other_options), n=1, cutoff=0.75)
    return close[0] if close else None


def unknown_option_error(name: str, tool_options: list[str], other_options: list[str] = (),
                         what: str = "neither tokenbeam's nor Beam's") -> UserError:
    hint = closest_option(name, tool_options, other_options)
    return UserError(f"unknown option {name}" + (f": did you mean {hint}?" if hint else f" ({what}; see --help)"))
