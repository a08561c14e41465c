"""The Beam steps that belong to one command each: tokenize's (`tokenize_steps`), train's counting
pipeline (`train_count`) and the options both train processes read (`train_options`)."""
