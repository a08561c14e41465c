"""Reading datasets and tokenizers: the record readers and the plan of split files (`sources`),
the text of records that start in a byte window, for estimate's sampling (`byte_windows`), the
shard bookkeeping shared by every Beam job (`shards`: reading, parts, progress, rejected records,
manifests), the tokenizer files a command is given (`tokenizer_files`), the token Parquet files pack
reads (`pack_inputs`), watch mode's source of new shards (`watch`) and the one verdict of whether a
run is complete (`outcome`)."""
