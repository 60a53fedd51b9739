"""Prerequisites and a quiet SparkSession for the audit, the benchmark and the tests.

`java_problem()` and `pyspark_problem()` return a one-line reason, or None: Spark 4 needs
Java 17+ for its JVM and PySpark (with pyarrow) in this interpreter.  `create_session`
builds an embedded `local[N]` session bound to the loopback interface, with the web UI and the
console progress bar off and the JVM's log4j at ERROR; with another master it only sets what
the caller passes, so a cluster keeps its own settings.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

JAVA_MIN = 17
_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def java_executable() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = os.path.join(java_home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def java_version(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match[1])
    return int(match[2] or 0) if major == 1 else major


def java_problem() -> str | None:
    java = java_executable()
    if java is None:
        where = f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java" if os.environ.get("JAVA_HOME") \
            else "no `java` on PATH and JAVA_HOME is not set"
        return f"Java {JAVA_MIN}+ is required to run Spark, but {where} (install a JDK/JRE {JAVA_MIN}+)"
    version = java_version(java)
    if version is None:
        return f"Java {JAVA_MIN}+ is required to run Spark, but `{java} -version` did not say which Java it is"
    if version < JAVA_MIN:
        return f"Java {JAVA_MIN}+ is required to run Spark 4, but {java} is Java {version}"
    return None


def pyspark_problem() -> str | None:
    missing = []
    for module in ("pyspark", "pyarrow", "xxhash"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        return (f"{', '.join(missing)} not installed: pip install 'kafka-partition-storage[spark]' "
                f"(pyspark>=4.0, pyarrow, xxhash)")
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        return f"PySpark 4.0+ is required (its Python data source API), found {pyspark.__version__}"
    return None


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _log4j_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"storage-spark-log4j2-{os.getuid()}.properties")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == _LOG4J:
                return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_LOG4J)
    os.replace(tmp, path)
    return path


def create_session(master: str = "local[*]", *, app_name: str = "storage-audit", conf: dict | None = None):
    """A SparkSession with the `partitionlog` source registered.  Raises RuntimeError with the
    one-line reason when PySpark or Java is missing."""
    problem = pyspark_problem() or java_problem()
    if problem:
        raise RuntimeError(problem)
    from pyspark.sql import SparkSession

    from . import register

    settings = {}
    if is_local(master):
        # Workers must run this interpreter (it has pyspark and storage); the embedded
        # session talks to itself over the loopback interface only.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update({
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "8",
            "spark.driver.memory": "2g",
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_log4j_file()}",
        })
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if is_local(master):
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
