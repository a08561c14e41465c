"""Do two versions of tokenbeam write the same bytes? A check for reshapings, which must change no output.

    python3 tools/same_outputs.py BEFORE [AFTER] [--corpora ../shared/corpora] [--keep DIR]

BEFORE and AFTER are git revisions of this repository (AFTER defaults to the working tree as it is).
Each is checked out into a worktree of its own, its C extensions built there, and every command run on
the shared corpora (`sample/`, `multi/`, `code/`, `tiny/`; one path for both versions, since
input URLs are written into the outputs): train (plain and with a
budget), tokenize (kept and group fields, a baseline), pack, evaluate, stats, drift (a pair, over time,
and a report), estimate and encode. Then every file under each run's output folder is compared byte for
byte, with each command's exit code, its standard output and the `tokenbeam: ...` lines of its
standard error.

Files that keep an account of the inputs (stats.json, evaluate.json, train_report.json, _totals.json,
the `_SUCCESS` files, pack.json) are read on both sides through this tree's readers (schemas/), which
upgrade a file of an earlier version to the current one: a change of their layout version alone is
no difference, and every figure they hold is still compared.

What may differ between two runs of the same code is no output of the code: BEFORE runs twice, and a
JSON field whose value differs between those two runs (wall times, peak memory), or whose key names a
measurement (seconds, RSS), is left out of the comparison, by its path in the file (a line of a text file: by its number), and listed. Anything else that differs is printed, and the exit
code is 1.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from schemas import evaluate as evaluate_layout, pack as pack_layout, reports, stats as stats_layout, tables  # noqa: E402

# (name, arguments): run in the output folder, in order; `{sample}` and `{corpora}` are filled in.
COMMANDS = [
    ("train-sample", ["train", "--input", "{sample}/*.jsonl", "--output", "tok", "--vocab-size", "2048"]),
    ("train-budget", ["train", "--input", "{corpora}/multi/*.jsonl", "--input", "{corpora}/code/*.jsonl",
                      "--output", "tok-budget", "--vocab-size", "4096", "--max-unique", "20000"]),
    ("tokenize-sample", ["tokenize", "--tokenizer", "tok", "--input", "{sample}/*.jsonl", "--output", "tokens",
                         "--keep-field", "source", "--group-field", "source"]),
    ("tokenize-multi", ["tokenize", "--tokenizer", "tok-budget", "--input", "{corpora}/multi/*.jsonl",
                        "--output", "tokens-multi"]),
    ("tokenize-code-baseline", ["tokenize", "--tokenizer", "tok-budget", "--input", "{corpora}/code/*.jsonl",
                                "--output", "tokens-code", "--baseline", "tokens-multi/stats.json"]),
    ("tokenize-tiny", ["tokenize", "--tokenizer", "tok", "--input", "{corpora}/tiny/*.jsonl", "--output", "tokens-tiny"]),
    ("pack", ["pack", "--input", "tokens", "--output", "packed", "--seq-len", "128", "--bos-token", "0"]),
    ("evaluate", ["evaluate", "--tokenizer", "tok", "--tokenizer", "tok-budget", "--input", "{sample}/*.jsonl",
                  "--output", "evaluated"]),
    ("stats", ["stats", "tokens/*.parquet", "--tokenizer", "tok", "--output", "rebuilt/stats.json",
               "--group-field", "source"]),
    ("drift-pair", ["drift", "tokens/stats.json", "tokens-tiny/stats.json", "--report", "drift-pair"]),
    ("drift-over-time", ["drift", "tokens/stats.json", "tokens-tiny/stats.json", "rebuilt/stats.json",
                         "--report", "drift-over-time"]),
    ("drift-same", ["drift", "tokens/stats.json", "rebuilt/stats.json"]),
    ("estimate", ["estimate", "--tokenizer", "tok-budget", "--input", "{corpora}/multi/*.jsonl", "--sample", "5%",
                  "--seed", "7", "--output", "estimate.json"]),
    ("encode", ["encode", "--tokenizer", "tok", "Hello world, 1999 times: naïve café 東京"]),
    ("help", ["--help"]),
]


RUNS = ("before", "before-again", "after")      # the output folders of the three runs


def checkout(revision: str | None, where: Path) -> Path:
    """A worktree of `revision` (None: a copy of the working tree as it is), its extensions built."""
    if revision is None:
        shutil.copytree(ROOT, where, ignore=shutil.ignore_patterns(".git", "__pycache__", "build", "*.so"))
    else:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), revision], check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=where, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return where


def run_all(code: Path, out: Path, corpora: Path) -> None:
    """Every command of COMMANDS with `code`'s tokenbeam, in `out`; each one's exit code, standard output and
    message lines saved to `out/_commands/NAME.txt`."""
    out.mkdir(parents=True)
    (out / "_commands").mkdir()
    env = dict(os.environ, PYTHONPATH=str(code))
    for name, arguments in COMMANDS:
        filled = [a.format(sample=corpora / "sample", corpora=corpora) for a in arguments]
        done = subprocess.run([sys.executable, "-m", "pipelines.cli", *filled], cwd=out, env=env,
                              capture_output=True, text=True)
        messages = [line for line in done.stderr.splitlines() if line.startswith("tokenbeam: ")]
        if done.returncode < 0:     # killed by a signal: what it said last is the evidence
            messages += ["(killed by a signal; the end of its standard error:)", *done.stderr.splitlines()[-20:]]
        (out / "_commands" / f"{name}.txt").write_text(
            f"exit {done.returncode}\n--- stdout\n{done.stdout}--- messages\n" + "\n".join(messages) + "\n")
        print(f"  {name}: exit {done.returncode}", flush=True)


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def json_differences(a, b, path: str = "") -> set[str]:
    """The paths (`key/key/3`) at which two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = {f"{path}/{k}" for k in a.keys() ^ b.keys()}
        for k in a.keys() & b.keys():
            found |= json_differences(a[k], b[k], f"{path}/{k}")
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return set().union(*(json_differences(x, y, f"{path}/{i}") for i, (x, y) in enumerate(zip(a, b))))
    return set() if a == b else {path or "/"}


def as_text(path: Path) -> str | None:
    """A file's text with its run's folder spelt `<run>` (outputs that name their own folder, such as
    pack.json's input URLs, then compare across runs), or None for a binary file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None
    run = next((parent for parent in path.parents if parent.name in RUNS), None)
    return text.replace(str(run), "<run>") if run is not None else text


def read_json(path: Path, upgrade: bool = True):
    text = as_text(path)
    try:
        d = None if text is None else json.loads(text)
    except ValueError:
        return None
    return upgraded(path, d) if upgrade else d


def upgraded(path: Path, d):
    """A file that keeps an account, as the current version of its layout (old versions upgraded by
    this tree's readers); any other JSON as it is."""
    if not isinstance(d, dict):
        return d
    if d.get("kind") == stats_layout.STATS_KIND:
        return stats_layout.upgrade_stats(d)
    if d.get("kind") == evaluate_layout.EVALUATE_KIND:
        return evaluate_layout.upgrade_evaluate(d)
    if path.name == "train_report.json":
        return reports.upgrade_train_report(d)
    if path.name == "_totals.json":
        return reports.upgrade_totals(d)
    if path.name == pack_layout.PACK_JSON:
        return pack_layout.upgrade_pack_json(d)
    if path.name == "_SUCCESS":
        if "stats" in d:                            # tokenize's
            return tables.upgrade_success(d)
        if "evaluate" in d:
            return evaluate_layout.upgrade_success(d, read_json(path.parent / d["evaluate"], upgrade=False))
        if "tokenizer_sha256" in d and "files" in d:   # train's
            return reports.upgrade_train_report(d)
    return d


def differences(a: Path, b: Path, volatile: dict[str, set[str]]) -> list[str]:
    """What differs between two output folders, leaving out the JSON paths in `volatile[file]`."""
    found = []
    names_a, names_b = files_under(a), files_under(b)
    found += [f"only in the first: {n}" for n in sorted(names_a - names_b)]
    found += [f"only in the second: {n}" for n in sorted(names_b - names_a)]
    for name in sorted(names_a & names_b):
        if filecmp.cmp(a / name, b / name, shallow=False):
            continue
        ja, jb = read_json(a / name), read_json(b / name)
        if ja is None or jb is None:
            ja, jb = text_lines(a / name), text_lines(b / name)
        if ja is None or jb is None:
            found.append(f"differs: {name}")
            continue
        paths = {p for p in json_differences(ja, jb) - volatile.get(name, set()) if not measured(p)}
        if paths:
            found.append(f"differs: {name} at {', '.join(sorted(paths)[:8])}")
    return found


def text_lines(path: Path) -> list[str] | None:
    """A text file as its lines (compared as a JSON list: a line is a path), else None."""
    text = as_text(path)
    return None if text is None else text.splitlines()


# Keys of measurements, never outputs of the code: left out even where two runs happened to agree.
MEASURED = ("seconds", "rss", "started_at", "mb_per_cpu_second")


def measured(path: str) -> bool:
    return any(word in part for part in path.split("/") for word in MEASURED)


def volatile_paths(a: Path, b: Path) -> dict[str, set[str]]:
    """JSON paths (or line numbers of a text file) that differ between two runs of the same code, per file."""
    out = {}
    for name in files_under(a) & files_under(b):
        ja, jb = read_json(a / name), read_json(b / name)
        if ja is None or jb is None:
            ja, jb = text_lines(a / name), text_lines(b / name)
        if ja is not None and jb is not None:
            paths = json_differences(ja, jb)
            if paths:
                out[name] = paths
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", help="git revision of the first version")
    parser.add_argument("after", nargs="?", default=None, help="git revision (default: the working tree)")
    parser.add_argument("--corpora", type=Path, default=ROOT.parent / "shared" / "corpora")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="same-outputs-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    trees = []
    try:
        before = checkout(args.before, work / "before-code")
        trees.append(before)
        after = checkout(args.after, work / "after-code")
        if args.after is not None:
            trees.append(after)
        for label, code in zip(RUNS, (before, before, after)):
            print(f"{label}: {args.before if code is before else (args.after or 'working tree')}", flush=True)
            run_all(code, work / label, args.corpora.resolve())
        volatile = volatile_paths(work / "before", work / "before-again")
        for name, paths in sorted(volatile.items()):
            print(f"left out (differs between two runs of the same code): {name}: {', '.join(sorted(paths)[:6])}"
                  + (" ..." if len(paths) > 6 else ""))
        noise = differences(work / "before", work / "before-again", volatile)
        found = differences(work / "before", work / "after", volatile)
        for line in noise:
            print(f"NOT REPRODUCIBLE (two runs of BEFORE): {line}")
        for line in found:
            print(f"DIFFERENT: {line}")
        compared = len(files_under(work / "before"))
        print(f"{compared} files compared; {len(found)} differ" + ("" if found else ": the same outputs"))
        return 1 if found or noise else 0
    finally:
        for tree in trees:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
