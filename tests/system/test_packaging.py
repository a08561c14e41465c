"""Packaging as Dataflow does it: `--setup_file ./setup.py` builds an sdist with `setup.py sdist` and
workers `pip install` it. Here the sdist is installed into a fresh venv (no editable install, no
repository on the path) and `tokenbeam train` / `tokenbeam tokenize` run from a folder outside the
repository, tokenize with two worker processes, which import only what the package installed. The
outputs must be the bytes an in-repository run writes.

The venv sees the site-packages of the environment running the tests (through a .pth file, whether
that environment is a venv or the system's Python), so Beam and pyarrow are not downloaded again and
`--no-build-isolation` builds with that environment's setuptools and wheel (the [test] extra). Not
`--system-site-packages`: made from a venv's interpreter, that would show the base interpreter's
site-packages instead, which need not hold wheel or Beam. The .pth lists folders only, so the .pth
files in them (an editable install of this repository among them) are not run."""
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile

import pytest

from pipelines import tokenize, train
from tests.conftest import ROOT

# What a copy of the work tree leaves out: version control, caches and build products.
NOT_SOURCES = shutil.ignore_patterns(".git", ".hypothesis", ".benchmarks", ".pytest_cache", "__pycache__",
                                     "build", "dist", "runs", "*.egg-info", "*.so")


def run(cmd, cwd, env=None, timeout=300):
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def clean_env():
    """The environment without anything that would put the repository on the path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    """The sdist of a copy of the work tree (building in place would write egg-info into the repo)."""
    tmp = tmp_path_factory.mktemp("sdist")
    shutil.copytree(ROOT, tmp / "src", ignore=NOT_SOURCES)
    run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", tmp / "dist"], cwd=tmp / "src", env=clean_env())
    (archive,) = (tmp / "dist").glob("tokenbeam-*.tar.gz")
    return archive


def running_site_packages() -> list[str]:
    """The site-packages folders of the environment running the tests, in the order it searches them:
    a venv's own (and its base's, when it was made with --system-site-packages), or the system
    Python's; the user site when it is enabled."""
    paths = sysconfig.get_paths()
    folders = [*site.getsitepackages(), paths["purelib"], paths["platlib"]]
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    return list(dict.fromkeys(f for f in folders if os.path.isdir(f)))


@pytest.fixture(scope="module")
def venv(sdist, tmp_path_factory):
    """A fresh venv with the sdist installed into it (not editable); its bin/ folder."""
    home = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", home], cwd=home.parent, env=clean_env())
    python = home / "bin" / "python"
    own = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=home.parent,
              env=clean_env()).stdout.strip()
    assert os.path.realpath(own).startswith(os.path.realpath(home) + os.sep), own
    # After the venv's own site-packages on its sys.path: the running environment's, as plain folders.
    with open(os.path.join(own, "_running_environment.pth"), "w", encoding="utf-8") as f:
        f.write("".join(folder + "\n" for folder in running_site_packages()))
    # The running environment's pip, run by the venv's interpreter, installs into the venv.
    run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--quiet", sdist], cwd=home.parent, env=clean_env())
    return home / "bin"


def test_sdist_carries_every_module_and_the_c_source(sdist):
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for package in ("bpe_ops", "schemas", "pipelines"):
        modules = {f"{package}/{p.name}" for p in (ROOT / package).glob("*.py")}
        assert modules <= names, modules - names
    assert "bpe_ops/_merge_loop.c" in names and "setup.py" in names


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """A work folder outside the repository holding a copy of sample/."""
    work = tmp_path_factory.mktemp("outside")
    assert ROOT not in work.parents
    shutil.copytree(ROOT / "sample", work / "sample")
    return work


TRAIN = ["--input", "sample/*.jsonl", "--vocab-size", "2048", "--special-token", "<|endoftext|>"]
TOKENIZE = ["--input", "sample/*.jsonl", "--eos-token", "<|endoftext|>",
            "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


@pytest.fixture(scope="module")
def installed_run(venv, outside):
    run([venv / "tokenbeam", "train", *TRAIN, "--output", "installed/tok"], cwd=outside, env=clean_env())
    run([venv / "tokenbeam", "tokenize", "--tokenizer", "installed/tok/tokenizer.json", *TOKENIZE,
         "--output", "installed/tokens"], cwd=outside, env=clean_env())
    return outside / "installed"


@pytest.fixture(scope="module")
def repo_run(outside):
    """The same commands run from the repository's modules, in the same folder (so the shard paths
    recorded in the Parquet footers are the same). The worker processes find the repository through
    PYTHONPATH, as they would not from this folder otherwise."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(outside)
        mp.setenv("PYTHONPATH", str(ROOT))
        train.run([*TRAIN, "--output", "repo/tok"])
        tokenize.run(["--tokenizer", "repo/tok/tokenizer.json", *TOKENIZE, "--output", "repo/tokens"])
    return outside / "repo"


def test_installed_package_does_not_import_from_the_repository(venv, outside):
    code = ("import bpe_ops, bpe_ops.trainer, pipelines, schemas; "
            "print(bpe_ops.__file__); print(pipelines.__file__); print(schemas.__file__); "
            "print(bpe_ops.trainer._merge_loop.__file__)")
    files = run([venv / "python", "-c", code], cwd=outside, env=clean_env()).stdout.split()
    site = os.path.realpath(venv.parent / "lib") + os.sep
    assert len(files) == 4
    for f in files:                      # the compiled merge loop too: built from the sdist's C source
        assert os.path.realpath(f).startswith(site), f


def test_venv_runs_with_the_running_environments_libraries(venv, outside):
    """Beam, pyarrow and setuptools in the venv are the ones the tests run with, even when the tests run
    inside a venv whose base interpreter has none of them."""
    import apache_beam
    import pyarrow
    import setuptools
    code = "import apache_beam, pyarrow, setuptools; print(apache_beam.__file__, pyarrow.__file__, setuptools.__file__)"
    files = run([venv / "python", "-c", code], cwd=outside, env=clean_env()).stdout.split()
    assert [os.path.realpath(f) for f in files] == [
        os.path.realpath(m.__file__) for m in (apache_beam, pyarrow, setuptools)]


def test_installed_commands_write_the_same_bytes_as_the_repository(installed_run, repo_run):
    for name in ("tok/tokenizer.json", "tok/tokenizer.tiktoken", "tokens/_SUCCESS"):
        assert (installed_run / name).read_bytes() == (repo_run / name).read_bytes(), name
    parquet = sorted(p.name for p in (repo_run / "tokens").glob("*.parquet"))
    assert parquet == ["sample-000-of-002.parquet", "sample-001-of-002.parquet"]
    for name in parquet:
        assert (installed_run / "tokens" / name).read_bytes() == (repo_run / "tokens" / name).read_bytes(), name
    stats = [json.loads((d / "tokens" / "stats.json").read_text()) for d in (installed_run, repo_run)]
    for s in stats:
        del s["timing"], s["tokenizer"]
    assert stats[0] == stats[1] and stats[0]["records"] > 0
