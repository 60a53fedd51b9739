"""Spark for log dirs: the `partitionlog` data source and the fleet audit.

    import storage.spark
    storage.spark.register(spark)          # spark: a pyspark.sql.SparkSession (Spark 4)
    batches = spark.read.format("partitionlog").load(["/data/broker-1", "/data/broker-2"])
    records = (spark.read.format("partitionlog").option("level", "records")
               .option("payload", "true").load("/data/broker-1"))

    python -m storage audit /data/broker-1 /data/broker-2 /data/broker-3 [--master URL]

Modules: `scan` (finding segments, batch and record rows; plain Python), `source` (the data
source), `analysis` (lineage, failures and divergence of one topic-partition; plain Python),
`audit` (the CLI and its Spark job), `session` (Java check, a quiet embedded session),
`generate` (fleets of realistic logs with injected faults).

Importing this package imports neither pyspark nor pyarrow: the CLI must be able to say
that Java or PySpark is missing in one line, and Spark's forked Python workers import only
the modules their task needs (`source` and `scan`).
"""
from __future__ import annotations

__all__ = ["register"]


def register(spark) -> None:
    """Register the `partitionlog` data source with a SparkSession."""
    from .source import PartitionLogDataSource

    spark.dataSource.register(PartitionLogDataSource)
