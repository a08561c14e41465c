"""Beam's side of the command line: which flags are Beam's, the runner to use, and its workers.

The tool's own flags are parsed with argparse; everything else must be a flag that Beam's
`PipelineOptions` knows (the way Beam's `wordcount` example hands them on) or a bare argument,
which is one more input (so an unquoted glob that the shell expanded reads every file it matched).
Importing this module imports Beam.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os


class _HideImportWarning(logging.Filter):
    """Drops one warning Beam logs at import about a package it imports only for a connector: noise
    for every run of ours."""

    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def filter(self, record: logging.LogRecord) -> bool:
        return self.message not in record.getMessage()


# On the root logger when the GCP extra is not installed (it brings apitools where it is needed).
logging.getLogger().addFilter(_HideImportWarning("apitools not found"))
# On the MongoDB connector's logger where pymongo is hidden (hidden_packages.UNUSED) or absent.
logging.getLogger("apache_beam.io.mongodbio").addFilter(_HideImportWarning("compatible bson package"))

import apache_beam as beam  # noqa: E402  (after the filter: the warning is logged at import)
from apache_beam.options.pipeline_options import (  # noqa: E402
    DirectOptions, PipelineOptions, StandardOptions)

from pipelines.core.option_names import unknown_option_error  # noqa: E402
from pipelines.core.errors import UserError  # noqa: E402


def _ask_ipython_only_when_loaded() -> None:
    """Beam asks `is_in_ipython()` while it labels every transform and runs a pipeline, and the
    question imports IPython whenever it is installed (half a second of every run here, a sixth
    of a small job). Code running inside IPython has imported it already, so without IPython in
    `sys.modules` the answer is no; with it, Beam's own check answers. Patched where Beam looks
    the function up."""
    import sys

    from apache_beam import pipeline as beam_pipeline
    from apache_beam.runners.direct import direct_runner
    from apache_beam.utils import interactive_utils

    original = interactive_utils.is_in_ipython
    if getattr(original, "asks_only_when_loaded", False):
        return

    def is_in_ipython() -> bool:
        return "IPython" in sys.modules and original()

    is_in_ipython.asks_only_when_loaded = True
    for module in (interactive_utils, beam_pipeline, direct_runner):
        if getattr(module, "is_in_ipython", None) is original:
            module.is_in_ipython = is_in_ipython


_ask_ipython_only_when_loaded()

# How often Beam's state sampler (one thread per bundle, timing each step for Beam's metrics) wakes,
# at most, in the processes that import this module: Beam's 200 ms is how long a bundle's end may
# wait for that thread to wake and see it is done (`StateSampler.stop` joins it), after every bundle
# of every stage (a tokenize job's tail: ~0.2 s of five stages' ends). Waking every 20 ms costs
# nothing measurable, and the per-step times it keeps are finer.
STATE_SAMPLING_MS = 20


def _sample_states_every(ms: int) -> None:
    """Make `ms` the default sampling period of Beam's `StateSampler` (which the SDK worker builds
    for each bundle processor without giving one); left as it is if Beam's signature has changed."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    if init.__defaults__ == (statesampler.DEFAULT_SAMPLING_PERIOD_MS,):
        init.__defaults__ = (ms,)


_sample_states_every(STATE_SAMPLING_MS)


def _view_each_options_class_once() -> None:
    """Beam builds a pipeline's options view of a class (`PipelineOptions.view_as`) anew each time
    it asks: an argparse parser of that class's flags, built and run over the command line (~0.4 ms),
    and asked for hundreds of times while a pipeline is built (each of its type checks reads one
    flag of `TypeOptions`): ~0.1 s of every command. A view holds no value of its own (they are
    all in the options' shared `_all_options`, read and written through any view), so the view
    made the first time is handed out again while the options still hold the same flags and values
    (a view made from other flags or values is made anew, as Beam makes it)."""
    import weakref

    view_as = PipelineOptions.view_as
    if getattr(view_as, "made_once", False):
        return
    views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def view_once(self, cls):
        made = views.get(self)
        view = made.get(cls) if made is not None else None
        if (view is None or view._all_options is not self._all_options  # noqa: SLF001  (Beam's own state)
                or view._flags is not self._flags):  # noqa: SLF001
            view = view_as(self, cls)
            views.setdefault(self, {})[cls] = view
        return view

    view_once.made_once = True
    view_once.__doc__ = view_as.__doc__
    PipelineOptions.view_as = view_once


_view_each_options_class_once()


def _find_each_dofns_specs_once() -> None:
    """Beam looks for a DoFn's state and timer specs (`userstate.get_dofn_specs`: the signatures of
    its methods, ~0.5 ms) each time it asks whether the DoFn is stateful, validates it or writes it
    into the pipeline: about 130 times per pipeline built here. A DoFn's methods do not change once
    it is applied, so the specs found for a DoFn object are handed out again (as new sets) while
    that object lives; what raises is asked again."""
    import weakref

    from apache_beam.transforms import userstate

    find = userstate.get_dofn_specs
    if getattr(find, "found_once", False):
        return
    found: dict[int, tuple] = {}

    def find_once(dofn):
        entry = found.get(id(dofn))
        if entry is None or entry[0]() is not dofn:
            state_specs, timer_specs = find(dofn)
            key = id(dofn)
            try:
                alive = weakref.ref(dofn, lambda _, key=key: found.pop(key, None))
            except TypeError:           # an object without weak references: asked each time
                return state_specs, timer_specs
            entry = found[key] = (alive, frozenset(state_specs), frozenset(timer_specs))
        return set(entry[1]), set(entry[2])

    find_once.found_once = True
    find_once.__doc__, find_once.__wrapped__ = find.__doc__, find
    userstate.get_dofn_specs = find_once


_find_each_dofns_specs_once()

__all__ = ["beam", "beam_option_names", "split_beam_args", "pipeline_options", "one_local_worker", "local_cores_per_worker",
           "check_worker_paths"]

SUPPORTED_RUNNING_MODES = ("in_memory", "multi_processing")


def beam_parser() -> argparse.ArgumentParser:
    """An argparse parser holding every flag of Beam's PipelineOptions classes, built as
    `PipelineOptions.get_all_options` builds it."""
    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    classes = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        with contextlib.suppress(argparse.ArgumentError):
            cls._add_argparse_args(parser)   # noqa: SLF001  (Beam's own way to list its flags)
    return parser


def beam_option_names() -> list[str]:
    """Every `--flag` of Beam's PipelineOptions."""
    return [name for name in beam_parser()._option_string_actions if name.startswith("--")]  # noqa: SLF001


def split_beam_args(rest: list[str], tool_options: list[str]) -> tuple[list[str], list[str]]:
    """Sort what the tool's parser left over into (Beam's flags with their values, bare arguments).

    `--flag value` and `--flag=value` of a flag Beam knows go to Beam; an argument that is no flag
    is a bare argument (the caller makes it an input); any other flag is a UserError naming the
    closest known option. Example: `["--runner", "DirectRunner", "b.jsonl"]` ->
    `(["--runner", "DirectRunner"], ["b.jsonl"])`; `["--min_count", "5"]` -> "unknown option
    --min_count: did you mean --min-count?".
    """
    actions = beam_parser()._option_string_actions    # noqa: SLF001
    beam_args: list[str] = []
    bare: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        i += 1
        if arg == "--":
            bare += rest[i:]
            break
        if not arg.startswith("-") or arg == "-":
            bare.append(arg)
            continue
        name, has_value, _ = arg.partition("=")
        action = actions.get(name)
        if action is None:
            raise unknown_option_error(name, tool_options, list(actions))
        beam_args.append(arg)
        if not has_value and action.nargs != 0 and i < len(rest):
            beam_args.append(rest[i])
            i += 1
    return beam_args, bare


def pipeline_options(beam_args: list[str]):
    """Beam `PipelineOptions` from Beam's flags, plus the runner to use.

    Without `--runner`, the local FnApiRunner is pinned: Beam 2.77's DirectRunner would first try to
    download a Prism binary. `multi_threading` is refused: it lost records in our measurements.
    """
    options = PipelineOptions(beam_args)
    # Beam parses its flags with argparse on first use: a bad value prints usage and exits. Keep
    # argparse's own line and make it ours.
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            direct = options.view_as(DirectOptions)
    except SystemExit:
        lines = said.getvalue().strip().splitlines() or ["invalid Beam options"]
        raise UserError(lines[-1].split("error: ", 1)[-1]) from None
    if direct.direct_running_mode not in SUPPORTED_RUNNING_MODES:
        raise UserError(
            f"--direct_running_mode={direct.direct_running_mode} is not supported: Beam's multi_threading "
            f"mode lost records in our measurements; use in_memory or multi_processing")
    runner = None
    named = options.view_as(StandardOptions).runner
    if named is None:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
        runner = FnApiRunner()
    else:
        from apache_beam.runners.runner import create_runner
        try:
            create_runner(named)         # what the pipeline will do; an unknown name fails here, in one line
        except (ValueError, ImportError) as exc:
            raise UserError(f"--runner {named}: {str(exc).splitlines()[0]}") from None
    return options, runner


def one_local_worker(options, runner) -> bool:
    """Whether the whole pipeline runs in this process (the pinned local runner in `in_memory` mode):
    there, spreading the shards over workers (a Reshuffle) is a stage for nothing."""
    return runner is not None and options.view_as(DirectOptions).direct_running_mode == "in_memory"


def local_cores_per_worker(options, runner) -> int:
    """The cores each worker may use for its own threads: on the pinned local runner, this machine's
    cores shared among its worker processes (all of them in one process in `in_memory` mode); on any
    other runner 1, since its workers already run one per core."""
    if runner is None:
        return 1
    direct = options.view_as(DirectOptions)
    cores = os.cpu_count() or 1
    # multi_processing with --direct_num_workers 0 (Beam: one worker per core) or unset (Beam: 1).
    workers = (direct.direct_num_workers or cores) if direct.direct_running_mode == "multi_processing" else 1
    return max(1, cores // workers)


def check_worker_paths(options, urls) -> None:
    """Refuse local paths on Dataflow, before the job is submitted: its workers run on other machines,
    so a local input would be unreadable there and a local output written to each worker's own disk
    and lost. (Flink and Spark clusters may share a mounted disk, so they are left to the user.)"""
    runner = options.view_as(StandardOptions).runner or ""
    local = [url for url in urls if "://" not in url or url.startswith("file://")]
    if "dataflow" in runner.lower() and local:
        raise UserError(f"--runner {runner} runs on remote workers, which cannot see local paths "
                        f"({', '.join(local)}): use gs:// (or another object store) URLs")
