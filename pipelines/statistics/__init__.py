"""Per-shard statistics summed into a dataset's: the summary combine of every tokenize run
(`summaries`), its breakdowns by group (`groups`) and by time window (`windows`), and the one
Breakdowns type that writes and rebuilds them (`breakdowns`)."""
