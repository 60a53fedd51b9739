"""MetaStore: the log dir's LMDB environment (storage/dir/meta.py).

Round trips of the databases, values surviving a reopen, one transaction per
`put_partitions` call (proved by failing a call half-way), map growth from a tiny map, use
after fork() in a child, damaged store files (checked in a subprocess: LMDB on a damaged
file can kill the process with SIGBUS, which must not take the test run with it), and use
after close.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.core import errors
from storage.dir.meta import FILE_NAME, MetadataError, MetaStore, PartitionOffsets

PAGE = 4096   # LMDB's page size on Linux x86-64 (two meta pages, then data pages)


@pytest.fixture(params=[False, True], ids=["nosync", "sync"])
def sync(request):
    return request.param


def store_path(directory):
    return os.path.join(os.fspath(directory), FILE_NAME)


# ---- round trips ----------------------------------------------------------------------------

def test_partition_offsets_round_trip(tmp_path, sync):
    with MetaStore(tmp_path, sync=sync) as store:
        assert store.get_partition("t", 0) is None
        assert store.partitions() == {}
        values = {("t", 0): PartitionOffsets(10, 0, 7),
                  ("t", 1): PartitionOffsets(0, 0, 0),
                  ("other-topic", 12): PartitionOffsets(2**63 - 1, 5, 2**62),
                  ("a\0b", 3): PartitionOffsets(1, 2, 3),           # a NUL inside the topic name
                  ("uni-ß-топик", 2**31 - 1): PartitionOffsets(-1, -1, -1)}
        store.put_partitions(values)
        for (topic, partition), offsets in values.items():
            got = store.get_partition(topic, partition)
            assert got == offsets and isinstance(got, PartitionOffsets)
        assert store.partitions() == values
        assert store.get_partition("t", 2) is None
        assert store.get_partition("t\0", 0) is None

        # A later call replaces only what it names.
        store.put_partitions({("t", 0): (11, 1, 8)})
        assert store.get_partition("t", 0) == PartitionOffsets(11, 1, 8)
        assert store.get_partition("t", 1) == PartitionOffsets(0, 0, 0)

        store.put_partition_state("t", 0, {"leader": 1})
        store.delete_partition("t", 0)
        assert store.get_partition("t", 0) is None
        assert store.get_partition_state("t", 0) is None   # deleted together with the offsets
        assert ("t", 0) not in store.partitions()
        assert len(store.partitions()) == len(values) - 1
        store.delete_partition("t", 0)                       # deleting a missing one is harmless
        store.delete_partition("never", 9)
        store.put_partitions({})                             # an empty commit changes nothing
        assert len(store.partitions()) == len(values) - 1


def test_json_documents_round_trip(tmp_path, sync):
    state = {"leader": 3, "leader_epoch": 17, "partition_epoch": 4, "isr": [1, 2, 3],
             "replicas": [3, 1, 2], "leader_recovery_state": "RECOVERED", "note": "ünïcode ✓"}
    registration = {"broker_epoch": 99, "incarnation": "0f3c", "fenced": False, "listeners": None}
    with MetaStore(tmp_path, sync=sync) as store:
        assert store.get_partition_state("t", 0) is None
        assert store.get_broker(1) is None
        assert store.brokers() == {}
        store.put_partition_state("t", 0, state)
        store.put_partition_state("t", 1, {"leader": -1})
        store.put_broker(1, registration)
        store.put_broker(-1, {"weird": True})
        store.put_broker(2**40, {})
        assert store.get_partition_state("t", 0) == state
        assert store.get_partition_state("t", 1) == {"leader": -1}
        assert store.get_broker(1) == registration
        assert store.brokers() == {1: registration, -1: {"weird": True}, 2**40: {}}
        # documents and offsets are separate databases under the same key
        assert store.get_partition("t", 0) is None
        store.put_broker(1, {"broker_epoch": 100})
        assert store.get_broker(1) == {"broker_epoch": 100}
        # deleting a partition does not touch the broker registrations
        store.delete_partition("t", 1)
        assert store.get_partition_state("t", 1) is None
        assert store.get_partition_state("t", 0) == state
        assert len(store.brokers()) == 3


def test_documents_and_write_batch(tmp_path):
    with MetaStore(tmp_path, sync=False) as store:
        assert store.get_document("counters") is None
        assert store.partition_states() == {}
        store.put_document("counters", {"next_broker_epoch": 7})
        store.write_batch(brokers={1: {"broker_epoch": 7}, 2: {"broker_epoch": 8}},
                          partition_states={("t", 0): {"leader": 1}, ("t", 1): {"leader": 2}},
                          documents={"counters": {"next_broker_epoch": 9}, "other": {}})
        assert store.get_document("counters") == {"next_broker_epoch": 9}
        assert store.get_document("other") == {}
        assert store.brokers() == {1: {"broker_epoch": 7}, 2: {"broker_epoch": 8}}
        assert store.partition_states() == {("t", 0): {"leader": 1}, ("t", 1): {"leader": 2}}
        # One transaction: a value that cannot be serialised, after good ones, lands nothing.
        with pytest.raises(TypeError):
            store.write_batch(brokers={3: {"broker_epoch": 1}},
                              partition_states={("t", 2): {"leader": 3}},
                              documents={"counters": {"next_broker_epoch": 10}, "bad": {"x": object()}})
        assert store.get_broker(3) is None
        assert store.get_partition_state("t", 2) is None
        assert store.get_document("counters") == {"next_broker_epoch": 9}
        assert store.get_document("bad") is None
    with MetaStore(tmp_path, sync=False) as store:
        assert store.get_document("counters") == {"next_broker_epoch": 9}
        assert len(store.partition_states()) == 2


def test_full_store_without_a_newer_database_opens(tmp_path):
    """A store written with fewer databases, and full to its map: it opens (the missing
    database is created, growing the map if that needs room) and takes writes."""
    path = store_path(tmp_path)
    env = lmdb.open(path, subdir=False, map_size=128 << 10, max_dbs=3)
    db = env.open_db(b"brokers")
    i = 0
    try:
        while True:
            with env.begin(write=True) as txn:
                txn.put(str(i).encode(), json.dumps({"pad": "x" * 300}).encode(), db=db)
            i += 1
    except lmdb.MapFullError:
        pass
    env.close()
    assert i > 10
    with MetaStore(tmp_path, sync=False, map_bytes=128 << 10) as store:
        assert len(store.brokers()) == i
        store.put_document("counters", {"n": 1})
        for j in range(i, 2 * i):
            store.put_broker(j, {"pad": "y" * 300})
        assert store.map_bytes > 128 << 10
        assert store.get_document("counters") == {"n": 1}
        assert len(store.brokers()) == 2 * i


def test_values_survive_close_and_reopen(tmp_path, sync):
    offsets = {("t", p): PartitionOffsets(p * 10, p, p * 5) for p in range(50)}
    with MetaStore(tmp_path, sync=sync) as store:
        store.put_partitions(offsets)
        store.put_partition_state("t", 3, {"leader": 2, "isr": [2]})
        store.put_broker(7, {"broker_epoch": 12})
        store.delete_partition("t", 49)
        store.sync_to_disk()
    del offsets[("t", 49)]
    assert os.path.isfile(store_path(tmp_path))
    for _ in range(2):
        with MetaStore(tmp_path, sync=sync) as store:
            assert store.partitions() == offsets
            assert store.get_partition("t", 49) is None
            assert store.get_partition_state("t", 3) == {"leader": 2, "isr": [2]}
            assert store.brokers() == {7: {"broker_epoch": 12}}


def test_reopen_in_another_process_sees_committed_data(tmp_path):
    """sync=True: what put_partitions committed is in the file when it returns (read back by a
    fresh process, without closing the writer)."""
    store = MetaStore(tmp_path, sync=True)
    store.put_partitions({("t", 0): (5, 1, 4), ("t", 1): (6, 2, 5)})
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from storage.dir.meta import MetaStore
        s = MetaStore({str(tmp_path)!r})
        print(sorted((k, tuple(v)) for k, v in s.partitions().items()))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[(('t', 0), (5, 1, 4)), (('t', 1), (6, 2, 5))]"
    store.close()


# ---- one transaction per put_partitions ------------------------------------------------------

class ExplodingDict(dict):
    """A dict whose items() raises after yielding `limit` items."""

    def __init__(self, data, limit):
        super().__init__(data)
        self.limit = limit

    def items(self):
        for i, item in enumerate(super().items()):
            if i == self.limit:
                raise RuntimeError("boom in the middle of the iteration")
            yield item


def _seed(store):
    before = {("t", p): PartitionOffsets(p, p, p) for p in range(20)}
    store.put_partitions(before)
    return before


def test_put_partitions_failing_mid_iteration_changes_nothing(tmp_path):
    with MetaStore(tmp_path, sync=False) as store:
        before = _seed(store)
        update = {("t", p): PartitionOffsets(1000 + p, 1000, 1000) for p in range(10)}
        update.update({("new", p): PartitionOffsets(1, 1, 1) for p in range(5)})
        with pytest.raises(RuntimeError, match="boom"):
            store.put_partitions(ExplodingDict(update, limit=8))
        assert store.partitions() == before
        # The store is still usable, and the same update without the failure goes in whole.
        store.put_partitions(update)
        assert store.partitions() == {**before, **update}


@pytest.mark.parametrize("bad", [
    PartitionOffsets("x", 0, 0),          # not an integer
    PartitionOffsets(2**63, 0, 0),        # does not fit an int64
    (1, 2),                               # wrong arity
    PartitionOffsets(1, None, 3),
], ids=["str", "overflow", "arity", "none"])
def test_put_partitions_with_an_unpackable_value_changes_nothing(tmp_path, bad):
    with MetaStore(tmp_path, sync=False) as store:
        before = _seed(store)
        update = {("t", p): PartitionOffsets(500 + p, 0, 0) for p in range(20)}
        update[("zz-last", 0)] = bad       # inserted last: iterated after every good one
        with pytest.raises(Exception) as info:
            store.put_partitions(update)
        assert not isinstance(info.value, lmdb.Error)
        assert store.partitions() == before
        # and a reopen shows the same: nothing of the failed call reached the file
    with MetaStore(tmp_path, sync=False) as store:
        assert store.partitions() == before


def test_put_partitions_failing_after_a_map_resize_changes_nothing(tmp_path):
    """A call that fills the map is retried in a grown map; if it then fails, none of it lands."""
    with MetaStore(tmp_path, sync=False, map_bytes=32 << 10) as store:
        before = _seed(store)
        big = {(f"topic-{i:05d}", i): PartitionOffsets(i, i, i) for i in range(3000)}
        with pytest.raises(RuntimeError, match="boom"):
            store.put_partitions(ExplodingDict(big, limit=2500))
        assert store.partitions() == before
        store.put_partitions(big)
        assert store.partitions() == {**before, **big}


# ---- map growth ------------------------------------------------------------------------------

def test_map_grows_when_full(tmp_path):
    initial = 32 << 10
    store = MetaStore(tmp_path, sync=False, map_bytes=initial)
    # (Creating the databases may already have needed a doubling or two.)
    opened = store.map_bytes
    assert initial <= opened <= 4 * initial
    doc = {"payload": "x" * 1000}
    count = 1500                           # ~1.5 MB of documents in a 32 KiB map
    for i in range(count):
        store.put_partition_state("topic", i, {**doc, "i": i})
        store.put_broker(i, {"broker_epoch": i, "pad": "y" * 900})
    store.put_partitions({("topic", i): PartitionOffsets(i, 0, i) for i in range(count)})
    grown = store.map_bytes
    assert grown >= 16 * opened           # ~3 MB of documents: MapFullError, many times over
    assert grown >= os.path.getsize(store_path(tmp_path))
    assert grown & (grown - 1) == 0       # doubled from a power of two
    for i in (0, 1, count // 2, count - 1):
        assert store.get_partition_state("topic", i) == {**doc, "i": i}
        assert store.get_broker(i) == {"broker_epoch": i, "pad": "y" * 900}
    assert len(store.brokers()) == count
    assert len(store.partitions()) == count
    store.close()

    # Reopening with the tiny map again: LMDB takes the size the file needs, data intact,
    # and writes keep working (growing again when needed).
    with MetaStore(tmp_path, sync=False, map_bytes=initial) as store:
        assert store.map_bytes >= os.path.getsize(store_path(tmp_path))
        assert len(store.brokers()) == count
        assert store.get_partition_state("topic", count - 1) == {**doc, "i": count - 1}
        for i in range(count, count + 500):
            store.put_broker(i, {"pad": "z" * 1000})
        assert len(store.brokers()) == count + 500
        assert store.partitions()[("topic", 7)] == PartitionOffsets(7, 0, 7)


def test_one_huge_document_larger_than_the_map(tmp_path):
    with MetaStore(tmp_path, sync=False, map_bytes=32 << 10) as store:
        doc = {"blob": "q" * (600 << 10)}
        store.put_partition_state("t", 0, doc)
        assert store.get_partition_state("t", 0) == doc
        assert store.map_bytes >= 600 << 10


# ---- fork -----------------------------------------------------------------------------------

def _wait_child(pid):
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"child died: status {status:#x}"
    return os.WEXITSTATUS(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_store_used_in_a_forked_child(tmp_path):
    store = MetaStore(tmp_path, sync=True)
    store.put_partitions({("t", 0): (1, 0, 1)})
    store.put_broker(1, {"broker_epoch": 1})
    # Only the id: a reference to the environment object would keep it alive in the child,
    # where py-lmdb then refuses a second open of the same file ("already open in this process").
    parent_env_id = id(store._env)
    pid = os.fork()
    if pid == 0:   # child: never return into pytest
        status = 1
        try:
            ok = store.get_partition("t", 0) == PartitionOffsets(1, 0, 1)
            store.put_partitions({("t", 1): (22, 2, 20), ("t", 0): (3, 0, 3)})
            store.put_broker(2, {"broker_epoch": 5})
            ok = ok and store.get_partition("t", 1) == PartitionOffsets(22, 2, 20)
            ok = ok and store._pid == os.getpid()        # reopened its own environment
            store.close()
            status = 0 if ok else 2
        except BaseException:
            status = 3
        finally:
            os._exit(status)
    assert _wait_child(pid) == 0
    # The parent's environment is intact and sees the child's commits.
    assert id(store._env) == parent_env_id and store._pid == os.getpid()
    assert store.get_partition("t", 1) == PartitionOffsets(22, 2, 20)
    assert store.get_partition("t", 0) == PartitionOffsets(3, 0, 3)
    assert store.get_broker(2) == {"broker_epoch": 5}
    store.put_partitions({("t", 2): (7, 7, 7)})
    assert len(store.partitions()) == 3
    store.close()
    with MetaStore(tmp_path) as again:
        assert again.partitions() == {("t", 0): (3, 0, 3), ("t", 1): (22, 2, 20), ("t", 2): (7, 7, 7)}
        assert again.brokers() == {1: {"broker_epoch": 1}, 2: {"broker_epoch": 5}}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_closing_the_store_leaves_the_parent_working(tmp_path):
    store = MetaStore(tmp_path, sync=False)
    store.put_partitions({("t", 0): (1, 1, 1)})
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            store.close()          # must not close the parent's environment
            status = 0
        finally:
            os._exit(status)
    assert _wait_child(pid) == 0
    assert store.get_partition("t", 0) == PartitionOffsets(1, 1, 1)
    store.put_partitions({("t", 0): (2, 2, 2)})
    assert store.get_partition("t", 0) == PartitionOffsets(2, 2, 2)
    store.close()


# ---- closed store ---------------------------------------------------------------------------

def test_closed_store_raises_metadata_error(tmp_path):
    store = MetaStore(tmp_path, sync=False)
    store.put_partitions({("t", 0): (1, 1, 1)})
    store.close()
    store.close()                              # idempotent
    store.sync_to_disk()                       # nothing to sync: harmless
    calls = [lambda: store.get_partition("t", 0), store.partitions,
             lambda: store.put_partitions({("t", 1): (1, 1, 1)}), lambda: store.delete_partition("t", 0),
             lambda: store.put_partition_state("t", 0, {}), lambda: store.get_partition_state("t", 0),
             lambda: store.put_broker(1, {}), lambda: store.get_broker(1), store.brokers]
    for call in calls:
        with pytest.raises(MetadataError, match="closed") as info:
            call()
        assert isinstance(info.value, errors.StorageError)
        assert info.value.file == store_path(tmp_path)
        assert store_path(tmp_path) in str(info.value)
        assert info.value.error_code == errors.Errors.KAFKA_STORAGE_ERROR
    # the data is still there for the next opener
    with MetaStore(tmp_path, sync=False) as store:
        assert store.get_partition("t", 0) == PartitionOffsets(1, 1, 1)


def test_metadata_error_is_a_storage_error_and_an_os_error():
    assert issubclass(MetadataError, errors.StorageError)
    assert issubclass(MetadataError, OSError)


def test_unopenable_path_raises_metadata_error(tmp_path):
    (tmp_path / FILE_NAME).mkdir()             # a directory where the file should be
    with pytest.raises(MetadataError) as info:
        MetaStore(tmp_path)
    assert store_path(tmp_path) in str(info.value)


# ---- damaged files (each checked in a fresh process) ----------------------------------------

_CHECKER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[2])
    from storage import errors
    from storage.dir.meta import MetaStore, MetadataError

    def run():
        store = MetaStore(sys.argv[1], sync=False)
        store.partitions(); store.brokers()
        store.get_partition("t", 3); store.get_partition_state("t", 3); store.get_broker(3)
        store.put_partitions({("t", 1000): (1, 2, 3)})
        store.put_broker(1000, {"after": "damage"})
        store.close()

    try:
        run()
        result = {"outcome": "ok"}
    except MetadataError as exc:
        result = {"outcome": "MetadataError", "message": str(exc),
                  "storage_error": isinstance(exc, errors.StorageError), "file": exc.file}
    except BaseException as exc:
        result = {"outcome": type(exc).__module__ + "." + type(exc).__name__, "message": str(exc)}
    print(json.dumps(result))
""")


def _build_store(directory):
    with MetaStore(directory, sync=True) as store:
        store.put_partitions({("t", p): PartitionOffsets(p, p, p) for p in range(200)})
        store.put_partitions({("corruptme", 7): PartitionOffsets(1, 2, 3)})
        for b in range(40):
            store.put_broker(b, {"host": f"broker-{b}.example", "pad": "p" * 400})
        store.put_broker(4242, {"host": "MARKERMARKERMARKER"})
        for p in range(50):
            store.put_partition_state("t", p, {"leader": p % 3, "isr": [0, 1, 2]})
        store.put_partition_state("t", 999, {"note": "STATEMARKERSTATEMARKER"})
    path = store_path(directory)
    assert os.path.getsize(path) > 8 * PAGE
    return path


def _check_in_child(directory):
    """Run the checker in a fresh interpreter; returns its JSON verdict, or the signal that
    killed it (LMDB maps the file: reading past a truncated end is SIGBUS)."""
    out = subprocess.run([sys.executable, "-c", _CHECKER, os.fspath(directory), os.getcwd()],
                         capture_output=True, text=True, timeout=120)
    if out.returncode < 0:
        return {"outcome": f"killed by {signal.Signals(-out.returncode).name}", "stderr": out.stderr[-500:]}
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _damage(path, how):
    data = bytearray(open(path, "rb").read())
    if how == "garbage-first-pages":
        data[:2 * PAGE] = bytes((i * 131 + 7) % 256 for i in range(2 * PAGE))
    elif how == "garbage-start":
        data[:64] = b"\xde\xad\xbe\xef" * 16
    elif how == "zero-meta-pages":
        data[:2 * PAGE] = bytes(2 * PAGE)
    elif how == "truncate-to-a-few-bytes":
        data = data[:13]
    elif how == "truncate-inside-first-page":
        data = data[:PAGE // 2]
    elif how == "text-file":
        data = bytearray(b"this is not an LMDB file\n" * 400)
    else:
        raise AssertionError(how)
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("how", ["garbage-first-pages", "garbage-start", "zero-meta-pages",
                                 "truncate-to-a-few-bytes", "truncate-inside-first-page", "text-file"])
def test_damaged_store_raises_metadata_error_naming_the_file(tmp_path, how):
    path = _build_store(tmp_path)
    _damage(path, how)
    verdict = _check_in_child(tmp_path)
    assert verdict["outcome"] == "MetadataError", verdict
    assert verdict["storage_error"]
    assert verdict["file"] == path
    assert path in verdict["message"]
    assert "lmdb" not in verdict["message"].split(":")[0].lower()


def test_empty_store_file_opens_as_a_new_store(tmp_path):
    """LMDB treats a zero-length file as a new environment: the weaker property (success or
    MetadataError, nothing else) is what can be asked."""
    path = _build_store(tmp_path)
    open(path, "wb").close()
    verdict = _check_in_child(tmp_path)
    assert verdict["outcome"] in ("ok", "MetadataError"), verdict


def _replace_everywhere(path, old, new):
    assert len(old) == len(new)
    data = open(path, "rb").read()
    assert old in data
    with open(path, "wb") as f:
        f.write(data.replace(old, new))


def test_damaged_document_read_singly_raises_metadata_error(tmp_path):
    path = _build_store(tmp_path)
    _replace_everywhere(path, b"MARKERMARKERMARKER", b"\xff" * 18)
    _replace_everywhere(path, b"STATEMARKERSTATEMARKER", b'"' * 22)
    with MetaStore(tmp_path, sync=False) as store:
        with pytest.raises(MetadataError) as info:
            store.get_broker(4242)
        assert path in str(info.value)
        with pytest.raises(MetadataError) as info:
            store.get_partition_state("t", 999)
        assert path in str(info.value)
        assert store.get_broker(3)["host"] == "broker-3.example"
        assert store.get_partition_state("t", 3) == {"leader": 0, "isr": [0, 1, 2]}


def test_damaged_document_listed_raises_metadata_error(tmp_path):
    path = _build_store(tmp_path)
    _replace_everywhere(path, b"MARKERMARKERMARKER", b"\xff" * 18)
    with MetaStore(tmp_path, sync=False) as store:
        with pytest.raises(MetadataError) as info:
            store.brokers()
        assert path in str(info.value)


def test_damaged_partition_state_listed_raises_metadata_error(tmp_path):
    path = _build_store(tmp_path)
    _replace_everywhere(path, b"STATEMARKERSTATEMARKER", b'"' * 22)
    with MetaStore(tmp_path, sync=False) as store:
        with pytest.raises(MetadataError) as info:
            store.partition_states()
        assert path in str(info.value)


def test_damaged_broker_key_raises_metadata_error(tmp_path):
    path = _build_store(tmp_path)
    # The key of broker 4242 is b"4242"; the JSON values never hold that string.
    _replace_everywhere(path, b"4242", b"42x2")
    with MetaStore(tmp_path, sync=False) as store:
        with pytest.raises(MetadataError) as info:
            store.brokers()
        assert path in str(info.value)


def test_damaged_partition_key_raises_metadata_error(tmp_path):
    path = _build_store(tmp_path)
    _replace_everywhere(path, b"corruptme\x007", b"corruptme\x00\xff")
    with MetaStore(tmp_path, sync=False) as store:
        assert store.get_partition("t", 5) == PartitionOffsets(5, 5, 5)   # other keys still readable
        with pytest.raises(MetadataError) as info:
            store.partitions()
        assert path in str(info.value)


@pytest.mark.parametrize("keep_pages", [2, 3])
def test_truncated_store_raises_metadata_error(tmp_path, keep_pages):
    path = _build_store(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(keep_pages * PAGE)
    verdict = _check_in_child(tmp_path)
    assert verdict["outcome"] == "MetadataError", verdict
    assert path in verdict["message"]


def test_the_tools_read_the_store_through_one_reader(tmp_path):
    """verify/epochs (storage.inspect) and the fleet audit (storage.spark) read partition offsets
    through meta.read_partition_offsets (they had two readers with different lock flags)."""
    from storage import LogConfig, LogDir
    from storage.dir.meta import FILE_NAME, read_partition_offsets
    from storage.inspect.discovery import log_dir_offsets
    from storage.spark.audit import log_dir_metadata

    with LogDir.open(tmp_path, LogConfig(fsync=False)) as logdir:
        log = logdir.partition("t", 3)
        for i in range(4):
            log.append_as_leader([b"v%d" % i], 0)
        log.update_high_watermark(3)
        log.increment_log_start_offset(1)
    stored = read_partition_offsets(tmp_path / FILE_NAME)
    assert stored[("t", 3)].high_watermark == 3 and stored[("t", 3)].log_start_offset == 1
    offsets, source, warnings = log_dir_offsets(str(tmp_path))
    assert (source, warnings) == ("storage.mdb", []) and offsets[("t", 3)] == stored[("t", 3)]._asdict()
    audit = log_dir_metadata(str(tmp_path))
    assert audit["high_watermarks"][("t", 3)] == 3 and audit["log_start_offsets"][("t", 3)] == 1


# ---- the size check refuses truncated files only: create/delete cycles with restarts ---------

def _topic_states(topic, count, generation):
    return {(topic, p): {"leader": p % 3, "isr": [0, 1, 2], "replicas": [0, 1, 2], "epoch": generation,
                         "pad": "x" * (p % 50)} for p in range(count)}


def test_big_topic_created_then_deleted_reopens(tmp_path):
    """The issue's case on the controller store: two topics, a broker, a 258-partition topic
    created then deleted, a close; the reopen was refused ("file is 106496 bytes, its pages
    need 126976") because pages allocated and freed inside one transaction count in the meta
    page's last_pgno but are never written."""
    with MetaStore(tmp_path) as store:
        store.write_batch(brokers={1: {"epoch": 1}}, documents={"counters": {"next": 2}},
                          partition_states={**_topic_states("a", 1, 0), **_topic_states("b", 1, 0)})
        store.write_batch(partition_states=_topic_states("big", 258, 0))
        store.write_batch(deleted_partition_states=list(_topic_states("big", 258, 0)))
    with MetaStore(tmp_path) as store:
        assert set(store.partition_states()) == {("a", 0), ("b", 0)}
        assert store.brokers() == {1: {"epoch": 1}}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["create", "delete", "reopen", "broker"]),
                          st.integers(0, 4), st.integers(1, 400)), min_size=1, max_size=12))
def test_create_delete_cycles_with_restarts_always_reopen(tmp_path_factory, steps):
    """Any sequence of topic creations/deletions (one transaction each, as the controller
    does), broker writes and restarts: every reopen succeeds and reads what was written."""
    directory = tmp_path_factory.mktemp("cycles")
    model, brokers = {}, {}
    store = MetaStore(directory, sync=False)
    try:
        for generation, (kind, topic_no, count) in enumerate(steps):
            topic = f"topic-{topic_no}"
            if kind == "create":
                states = _topic_states(topic, count, generation)
                store.write_batch(partition_states=states)
                model.update(states)
            elif kind == "delete":
                gone = [key for key in model if key[0] == topic]
                store.write_batch(deleted_partition_states=gone)
                for key in gone:
                    del model[key]
            elif kind == "broker":
                brokers[topic_no] = {"epoch": generation, "pad": "b" * count}
                store.write_batch(brokers={topic_no: brokers[topic_no]})
            else:
                store.close()
                store = MetaStore(directory, sync=False)
        store.close()
        store = MetaStore(directory, sync=False)
        assert store.partition_states() == model
        assert store.brokers() == brokers
    finally:
        store.close()


def test_file_cut_below_a_referenced_page_is_refused_and_one_cut_past_them_opens(tmp_path):
    """The guard stays: cut the file at the last page a tree references -> MetadataError (not
    SIGBUS); a file whose unwritten tail is only pages LMDB never reaches opens."""
    from storage.dir import meta_pages
    path = _build_store(tmp_path)
    with MetaStore(tmp_path) as store:
        store.write_batch(partition_states=_topic_states("big", 258, 0))
        store.write_batch(deleted_partition_states=list(_topic_states("big", 258, 0)))
    original = open(path, "rb").read()
    assert meta_pages.missing_page(path, PAGE) is None
    cut = len(original)
    while True:
        cut -= PAGE
        with open(path, "wb") as f:
            f.write(original[:cut])
        if meta_pages.missing_page(path, PAGE) is not None:
            break
        # free pages at the end, never reached: still a good file
        assert _check_in_child(tmp_path)["outcome"] == "ok"
    verdict = _check_in_child(tmp_path)
    assert verdict["outcome"] == "MetadataError", verdict
    assert path in verdict["message"] and "reference" in verdict["message"]


def test_the_tools_reader_refuses_a_truncated_store_instead_of_dying(tmp_path):
    """verify/epochs read storage.mdb through read_partition_offsets: a truncated store is a
    warning of theirs, not a SIGBUS of the tool."""
    from storage import LogConfig, LogDir
    with LogDir.open(tmp_path, LogConfig(fsync=False)) as logdir:
        logdir.partition("t", 0).append_as_leader([b"v"], 0)
    path = store_path(tmp_path)
    assert os.path.getsize(path) > 2 * PAGE
    with open(path, "r+b") as f:
        f.truncate(2 * PAGE)
    out = subprocess.run([sys.executable, "-m", "storage", "verify", "--json", os.fspath(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode >= 0, f"killed by signal {-out.returncode}"
    assert "cannot read the metadata store" in out.stdout and "reference" in out.stdout, out.stdout[-2000:]
