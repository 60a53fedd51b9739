"""Replication over the engine: the messages brokers exchange, the replica manager (leader and
follower sides of one broker), the follower's fetcher and the controller's model.

Replication asks the log (storage.log.partition, storage.dir.logdir); it never imports storage.sim."""
