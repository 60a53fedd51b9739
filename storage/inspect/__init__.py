"""Read-only views of log dirs, ours or Kafka's: discovery, scanning, epoch lineage, replica
comparison and kafka-dump-log.  Nothing here writes, and nothing opens a PartitionLog."""


class UsageError(ValueError):
    """A tool was pointed at something it cannot read as asked (not a directory, not a log dir,
    no such partition); the command line exits with status 2."""
