"""Testing tools: the simulated file system (crash injection with fsync disabled), the
hand-driven replication rig, the KIPs' named scenarios, invariant checkers and the
deterministic cluster simulator.  Importing this package does not switch any guard off;
`storage.core.guards.enter_simulation()` does, and only the simulator calls it."""
