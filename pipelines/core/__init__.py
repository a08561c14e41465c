"""What every command stands on: the command frame (`command`: arguments, help and one `run`; Beam's
options in `beam_options`), the exit codes and one-line messages (`errors`), and file access, where
every URL goes through one fsspec layer (`files`, output folders in `folders`, inputs in `inputs`)."""
