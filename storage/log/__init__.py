"""One partition's log: PartitionLog over its segments, reads, appends, recovery, retention, compaction, producer state, the epoch cache."""
