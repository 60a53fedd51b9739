"""One log directory: LogDir, its metadata store, its background work, the dir lock's tools."""
