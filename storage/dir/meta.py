"""The engine's metadata for one log dir, in one LMDB environment (`storage.mdb`).

Databases:
  partitions      "topic\\0partition" -> recovery point, log start offset, high watermark
                  (three int64, big-endian)
  partition_state "topic\\0partition" -> JSON: leader, leader epoch, partition epoch, ISR,
                  replicas, leader recovery state (written by the replication layer)
  brokers         "broker id"         -> JSON: broker registration (epoch, incarnation, ...)
  documents       "name"              -> JSON: named documents (the controller's counters)

Invariants:
  - `put_partitions` commits every partition it is given in one write transaction: after a
    crash all of them or none of them are updated (LMDB's commit is atomic and, with
    sync=True, durable when it returns);
  - when the map is full the map size doubles and the transaction is retried;
  - an environment is never used across fork(): a process whose pid differs from the one
    that opened it reopens its own (py-lmdb/LMDB forbid sharing an environment with a child);
  - a damaged file raises `MetadataError` naming it, never an lmdb exception from deep inside.
"""
from __future__ import annotations

import json
import os
import struct
import threading
from typing import NamedTuple

import lmdb

from ..core import errors
from . import meta_pages

FILE_NAME = "storage.mdb"
_OFFSETS = struct.Struct(">qqq")
_INITIAL_MAP_BYTES = 1 << 20
_DATABASES = (b"partitions", b"partition_state", b"brokers", b"documents")


class MetadataError(errors.StorageError, OSError):
    """The metadata store cannot be opened, read or written."""

    error_code = errors.Errors.KAFKA_STORAGE_ERROR


class PartitionOffsets(NamedTuple):
    recovery_point: int
    log_start_offset: int
    high_watermark: int


def _key(topic: str, partition: int) -> bytes:
    return f"{topic}\0{partition}".encode()


def _unkey(key: bytes) -> tuple[str, int]:
    topic, _, partition = key.decode().rpartition("\0")
    return topic, int(partition)


def read_partition_offsets(path) -> dict[tuple[str, int], PartitionOffsets]:
    """The partition offsets of a metadata store, for tools (verify, epochs, the fleet audit):
    read-only and without the lock file (a tool never writes into a log dir, and reads a dir
    no engine has open).  lmdb's own errors pass through: callers report them."""
    env = lmdb.open(os.fspath(path), subdir=False, readonly=True, lock=False, max_dbs=len(_DATABASES))
    try:
        problem = meta_pages.missing_page(path, env.stat()["psize"])
        if problem is not None:         # reading on would be SIGBUS
            raise lmdb.CorruptedError(problem)
        try:
            db = env.open_db(b"partitions", create=False)
        except lmdb.NotFoundError:
            return {}
        with env.begin(db=db) as txn:
            return {_unkey(k): PartitionOffsets(*_OFFSETS.unpack(v)) for k, v in txn.cursor()}
    finally:
        env.close()


class MetaStore:
    """The LMDB environment of one log dir."""

    def __init__(self, directory, *, sync: bool = True, map_bytes: int = _INITIAL_MAP_BYTES):
        self.path = os.path.join(os.fspath(directory), FILE_NAME)
        self.sync = sync
        self._map_bytes = map_bytes
        self._lock = threading.Lock()
        self._env = None
        self._pid = None
        self._dbs = {}
        self._open()

    def _open(self) -> None:
        while True:
            env = None
            try:
                env = lmdb.open(self.path, subdir=False, map_size=self._map_bytes, max_dbs=len(_DATABASES),
                                sync=self.sync, metasync=self.sync, lock=True, readahead=False)
                self._check_size(env)
                self._dbs = {name: env.open_db(name) for name in _DATABASES}
                break
            except lmdb.MapFullError:
                env.close()             # creating a missing database needs room: grow and retry
                self._map_bytes *= 2
            except lmdb.Error as exc:
                if env is not None:
                    env.close()
                raise MetadataError(f"cannot open the metadata store: {exc}", file=self.path) from exc
        self._map_bytes = max(self._map_bytes, env.info()["map_size"])
        self._env, self._pid = env, os.getpid()

    def _check_size(self, env) -> None:
        """A file shorter than the pages its trees reference would fault (SIGBUS) on access.
        Not the meta page's last_pgno: pages allocated and freed in one transaction count
        there but are never written, so a healthy file may end before it (meta_pages)."""
        problem = meta_pages.missing_page(self.path, env.stat()["psize"])
        if problem is not None:
            raise lmdb.CorruptedError(problem)

    def _environment(self):
        if self._env is None:
            raise MetadataError("the metadata store is closed", file=self.path)
        if self._pid != os.getpid():
            # Forked: the parent's environment must not be touched (not even closed) here.
            self._env = None
            self._open()
        return self._env

    def _write(self, fn):
        with self._lock:
            while True:
                env = self._environment()
                try:
                    with env.begin(write=True) as txn:
                        return fn(txn)
                except lmdb.MapFullError:
                    self._map_bytes *= 2
                    env.set_mapsize(self._map_bytes)
                except lmdb.Error as exc:
                    raise MetadataError(f"metadata write failed: {exc}", file=self.path) from exc

    def _read(self, fn):
        env = self._environment()
        try:
            with env.begin() as txn:
                return fn(txn)
        except lmdb.Error as exc:
            raise MetadataError(f"metadata read failed: {exc}", file=self.path) from exc
        except (ValueError, UnicodeDecodeError, struct.error) as exc:   # a damaged key or document
            raise MetadataError(f"malformed metadata record: {exc}", file=self.path) from exc

    @property
    def map_bytes(self) -> int:
        return self._map_bytes

    # ---- partition offsets ----
    def put_partitions(self, offsets: dict[tuple[str, int], PartitionOffsets]) -> None:
        """Store the offsets of every given partition in one transaction."""
        db = self._dbs[b"partitions"]

        def apply(txn):
            for (topic, partition), value in offsets.items():
                txn.put(_key(topic, partition), _OFFSETS.pack(*value), db=db)
        self._write(apply)

    def get_partition(self, topic: str, partition: int) -> PartitionOffsets | None:
        raw = self._read(lambda txn: txn.get(_key(topic, partition), db=self._dbs[b"partitions"]))
        return None if raw is None else self._decode_offsets(raw, topic, partition)

    def partitions(self) -> dict[tuple[str, int], PartitionOffsets]:
        def scan(txn):
            return {_unkey(k): self._decode_offsets(v, *_unkey(k))
                    for k, v in txn.cursor(db=self._dbs[b"partitions"])}
        return self._read(scan)

    def _decode_offsets(self, raw: bytes, topic: str, partition: int) -> PartitionOffsets:
        if len(raw) != _OFFSETS.size:
            raise MetadataError(f"offsets of {topic}-{partition} are {len(raw)} bytes, expected {_OFFSETS.size}",
                                file=self.path)
        return PartitionOffsets(*_OFFSETS.unpack(raw))

    def delete_partition(self, topic: str, partition: int) -> None:
        key = _key(topic, partition)

        def apply(txn):
            for name in (b"partitions", b"partition_state"):
                txn.delete(key, db=self._dbs[name])
        self._write(apply)

    # ---- partition state and broker registrations (JSON documents) ----
    def _put_json(self, db_name: bytes, key: bytes, value: dict) -> None:
        data = json.dumps(value, sort_keys=True).encode()
        self._write(lambda txn: txn.put(key, data, db=self._dbs[db_name]))

    def _get_json(self, db_name: bytes, key: bytes) -> dict | None:
        raw = self._read(lambda txn: txn.get(key, db=self._dbs[db_name]))
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise MetadataError(f"malformed {db_name.decode()} record {key!r}: {exc}", file=self.path) from exc

    def put_partition_state(self, topic: str, partition: int, state: dict) -> None:
        self._put_json(b"partition_state", _key(topic, partition), state)

    def get_partition_state(self, topic: str, partition: int) -> dict | None:
        return self._get_json(b"partition_state", _key(topic, partition))

    def put_broker(self, broker_id: int, registration: dict) -> None:
        self._put_json(b"brokers", str(broker_id).encode(), registration)

    def get_broker(self, broker_id: int) -> dict | None:
        return self._get_json(b"brokers", str(broker_id).encode())

    def brokers(self) -> dict[int, dict]:
        def scan(txn):
            return {int(k): json.loads(v) for k, v in txn.cursor(db=self._dbs[b"brokers"])}
        return self._read(scan)

    def put_document(self, name: str, value: dict) -> None:
        """A named JSON document (the controller keeps its counters here)."""
        self._put_json(b"documents", name.encode(), value)

    def get_document(self, name: str) -> dict | None:
        return self._get_json(b"documents", name.encode())

    def partition_states(self) -> dict[tuple[str, int], dict]:
        def scan(txn):
            return {_unkey(k): json.loads(v) for k, v in txn.cursor(db=self._dbs[b"partition_state"])}
        return self._read(scan)

    def write_batch(self, *, brokers: dict | None = None, partition_states: dict | None = None,
                    documents: dict | None = None, deleted_partition_states=()) -> None:
        """Several JSON records in one transaction (the controller's metadata changes)."""
        def apply(txn):
            for topic, partition in deleted_partition_states:
                txn.delete(_key(topic, partition), db=self._dbs[b"partition_state"])
            for broker_id, value in (brokers or {}).items():
                txn.put(str(broker_id).encode(), json.dumps(value, sort_keys=True).encode(), db=self._dbs[b"brokers"])
            for (topic, partition), value in (partition_states or {}).items():
                txn.put(_key(topic, partition), json.dumps(value, sort_keys=True).encode(),
                        db=self._dbs[b"partition_state"])
            for name, value in (documents or {}).items():
                txn.put(name.encode(), json.dumps(value, sort_keys=True).encode(), db=self._dbs[b"documents"])
        self._write(apply)

    # ---- life cycle ----
    def sync_to_disk(self) -> None:
        if self._env is not None and self._pid == os.getpid():
            self._env.sync(True)

    def close(self) -> None:
        if self._env is not None and self._pid == os.getpid():
            self._env.close()
        self._env = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
