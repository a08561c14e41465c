"""The Beam steps that belong to one command each: tokenize's (`tokenize_shard`, the DoFn of one
shard, composed of the steps in `tokenize_steps`), train's counting pipeline (`train_count`) and the
options both train processes read (`train_options`), pack's steps (`pack_steps`) and its outputs
(`pack_output`: the format writers and pack.json), evaluate's steps (`evaluate_steps`) and its report
(`evaluate_report`)."""
