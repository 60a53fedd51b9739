"""What every layer stands on: errors, the native core, the I/O seam, clock, guards, failure, config, records and columns, file names, checkpoint files."""
