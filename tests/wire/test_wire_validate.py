"""Kafka's validation of a Produce request's records (rules.produce_problem: ProduceRequest.
validateRecords, which KafkaApis.handleProduceRequest calls per partition) and the close of an
acks=0 producer's connection after an error (later.Close: KafkaApis' closeConnection).

The rules' cases are Kafka's clients ProduceRequestTest's, in our words; over the wire each is
sent to a broker with the express path and to one without (tests/wire/test_express.py's
brokers), one request at a time and pipelined: the same answers, nothing written.
"""
from __future__ import annotations

import socket
import struct
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.errors import Errors  # noqa: E402
from storage.core.records import build_batch  # noqa: E402
from storage.wire import codec, rules  # noqa: E402
from tests.wire.test_express import LAST, TOPIC, answers, broker, frame, frame_of_parts, logs  # noqa: E402
from tests.wire_support import Broker, _read, on_loop  # noqa: E402

T0 = 1_700_000_000_000
VERSIONS = range(3, LAST + 1)       # every Produce version served (v3+: Kafka's rules apply to each)
GOOD = build_batch([b"a"], base_timestamp=T0)
# Kafka's testV3AndAboveShouldContainOnlyOneRecordBatch: a batch of one record, then one of two.
TWO = GOOD + build_batch([(b"1", b"b"), b"c"], base_offset=1, base_timestamp=T0 + 1)
ZSTD = build_batch([b"a"], compression="zstd", base_timestamp=T0)


def legacy(magic: int) -> bytes:
    """One record (timestamp 10, no key, value "a") as a magic 0 or 1 message set, written by
    kafka-python's builder as Kafka's test writes it with MemoryRecords.builder."""
    from kafka.record.memory_records import MemoryRecordsBuilder
    builder = MemoryRecordsBuilder(magic=magic, compression_type=0, batch_size=256)
    assert builder.append(10, None, b"a") is not None
    builder.close()
    return bytes(builder.buffer())


def code(version: int, records: bytes, topic: str = TOPIC, transactional_id=None) -> int:
    problem = rules.produce_problem(topic, records, version, transactional_id)
    return Errors.NONE if problem is None else problem[0]


# ---- the rules: Kafka's clients ProduceRequestTest -------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_v3_and_above_should_contain_only_one_record_batch(version):
    """testV3AndAboveShouldContainOnlyOneRecordBatch; and a third whole batch, or a whole one
    after a batch that fills nothing else, the same."""
    assert code(version, TWO) == Errors.INVALID_RECORD
    assert code(version, GOOD + GOOD + GOOD) == Errors.INVALID_RECORD
    problem = rules.produce_problem(TOPIC, TWO, version)
    assert problem[1] == (f"Produce requests with version {version} are only allowed to contain exactly one "
                          f"record batch per partition")
    assert code(version, GOOD) == Errors.NONE


@pytest.mark.parametrize("version", VERSIONS)
def test_v3_and_above_cannot_have_no_record_batches(version):
    """testV3AndAboveCannotHaveNoRecordBatches (MemoryRecords.EMPTY); and what Kafka's batch
    reader reads as no batch: fewer than 12 bytes, fewer than 17, a batch cut short."""
    for records in (b"", GOOD[:11], GOOD[:16], GOOD[:-1]):
        assert code(version, records) == Errors.INVALID_RECORD, len(records)
    assert rules.produce_problem(TOPIC, b"", version)[1] == (
        f"Produce requests with version {version} must have at least one record batch per partition")


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("version", VERSIONS)
def test_v3_and_above_cannot_use_magic_v0_or_v1(version, magic):
    """testV3AndAboveCannotUseMagicV0, testV3AndAboveCannotUseMagicV1."""
    problem = rules.produce_problem(TOPIC, legacy(magic), version)
    assert problem == (Errors.INVALID_RECORD, f"Produce requests with version {version} are only allowed to "
                                              f"contain record batches with magic version 2")


@pytest.mark.parametrize("version", VERSIONS)
def test_v6_and_below_cannot_use_zstd_compression(version):
    """testV6AndBelowCannotUseZStdCompression (and core's testZSTDProduceRequest: v7 writes it)."""
    if version < 7:
        assert rules.produce_problem(TOPIC, ZSTD, version) == (
            Errors.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression")
        assert code(version, ZSTD + GOOD) == Errors.UNSUPPORTED_COMPRESSION_TYPE     # Kafka's order: before the second
    else:
        assert code(version, ZSTD) == Errors.NONE
        assert code(version, ZSTD + GOOD) == Errors.INVALID_RECORD
    assert code(version, build_batch([b"a"], compression="gzip", base_timestamp=T0)) == Errors.NONE


def test_what_kafkas_batch_reader_calls_corrupt():
    """ByteBufferLogInputStream.nextBatchSize: a length under 14, a magic outside 0..2 --
    in the first batch or where a second would start -- are CORRUPT_MESSAGE, with its text."""
    def with_length(records: bytes, at: int, length: int) -> bytes:
        return records[:at + 8] + struct.pack(">i", length) + records[at + 12:]

    def with_magic(records: bytes, at: int, magic: int) -> bytes:
        return records[:at + 16] + bytes([magic]) + records[at + 17:]
    assert rules.produce_problem(TOPIC, with_length(GOOD, 0, 13), 9) == (
        Errors.CORRUPT_MESSAGE, "Record size 13 is less than the minimum record overhead (14)")
    assert code(9, with_length(GOOD, 0, 1000)) == Errors.INVALID_RECORD      # longer than what is left: no batch
    assert code(9, with_length(GOOD + GOOD, len(GOOD), -1)) == Errors.CORRUPT_MESSAGE
    assert rules.produce_problem(TOPIC, with_magic(GOOD, 0, 3), 9) == (
        Errors.CORRUPT_MESSAGE, "Invalid magic found in record: 3")
    assert rules.produce_problem(TOPIC, with_magic(GOOD + GOOD, len(GOOD), 0xFF), 9) == (
        Errors.CORRUPT_MESSAGE, "Invalid magic found in record: -1")


def test_bytes_after_the_one_batch_that_are_no_batch_pass_as_in_kafka():
    """Kafka's iterator ends at fewer than 12 bytes or a batch cut short: validateRecords passes
    (the append then answers what it makes of them)."""
    for tail in (b"\0" * 11, GOOD[:-1], GOOD[:20]):
        assert code(9, GOOD + tail) == Errors.NONE, len(tail)


def test_the_order_of_the_rules():
    """Kafka's order: the records (KafkaApis), then the internal topic (ReplicaManager), then
    the control bit (LogValidator); the transactional rule last."""
    control = bytearray(GOOD)
    control[22] |= 0x20
    transactional = build_batch([b"t"], producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    assert code(9, b"", "__consumer_offsets") == Errors.INVALID_RECORD
    assert code(5, ZSTD, "__consumer_offsets") == Errors.UNSUPPORTED_COMPRESSION_TYPE
    assert code(9, bytes(control), "__consumer_offsets") == Errors.INVALID_TOPIC_EXCEPTION
    assert code(9, bytes(control) + GOOD) == Errors.INVALID_RECORD
    assert code(9, transactional) == Errors.INVALID_TXN_STATE
    assert code(9, transactional, transactional_id="tx") == Errors.NONE
    assert code(9, memoryview(GOOD)) == Errors.NONE      # a view of the request frame, as the paths pass it


# ---- over the wire, with and without the express path -------------------------------------------

def _run(root, frames, pipelined: bool, express: bool):
    """(answers, logs, requests the express path took, partition -> log end offset) of one broker."""
    with broker(root, express) as (server, loop, port):
        got = answers(port, frames, pipelined)
        return got, logs(server, loop), server.express.taken if express else 0, _ends(server, loop)


def _ends(server, loop) -> dict[int, int]:
    """The topic's partition -> log end offset."""
    return on_loop(loop, lambda: {k[1]: p.log.log_end_offset for k, p in server.node.manager.partitions.items()
                                  if k[0] == TOPIC})


def _codes(answer: bytes, version: int) -> list[tuple[int, str | None]]:
    body = codec.decode_response(0, version, answer[4:])[1]
    return [(p.error_code, getattr(p, "error_message", None)) for t in body.responses for p in t.partition_responses]


def test_refused_records_answered_alike_on_both_paths_and_never_written(tmp_path):
    """Each case three times (a shape the express path knows from its second), at express
    versions and below: the same answer bytes and logs either way, Kafka's codes, Kafka's text
    from v8 (which has the field), and the log holds only the good batches."""
    cases = [(9, b"", Errors.INVALID_RECORD), (9, TWO, Errors.INVALID_RECORD),
             (9, legacy(0), Errors.INVALID_RECORD), (8, legacy(1), Errors.INVALID_RECORD),
             (6, ZSTD, Errors.UNSUPPORTED_COMPRESSION_TYPE), (5, ZSTD, Errors.UNSUPPORTED_COMPRESSION_TYPE),
             (3, ZSTD, Errors.UNSUPPORTED_COMPRESSION_TYPE), (4, b"", Errors.INVALID_RECORD),
             (7, ZSTD, Errors.NONE), (9, GOOD, Errors.NONE)]
    frames, cid = [], 0
    for version, records, _ in cases:
        for _ in range(3):
            cid += 1
            frames.append(frame(cid, version, records=records))
    for pipelined in (False, True):
        (fast, fast_logs, taken, fast_ends), (general, general_logs, _, ends) = [
            _run(tmp_path / f"{express}-{pipelined}", frames, pipelined, express) for express in (True, False)]
        assert fast == general
        assert fast_logs == general_logs
        assert fast_ends == ends == {0: 2 + 6, 1: 2}    # the six good batches of one record, nothing else
        assert taken == 4           # the second and third of the v7 zstd and v9 good shapes
        for (version, records, want), answer in zip([c for c in cases for _ in range(3)], general):
            (got, message), = _codes(answer, version)
            assert got == want, (version, len(records))
            if want != Errors.NONE and version >= 8:
                assert message.startswith(f"Produce requests with version {version} ")


def test_the_other_partitions_of_the_request_go_on(tmp_path):
    """Per partition, as Kafka answers: an empty partition and one the topic lacks (its answer
    is UNKNOWN_TOPIC_OR_PARTITION, looked up before the records) beside a good one, which is written."""
    body = {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [{"name": TOPIC, "partition_data": [
        {"index": 0, "records": b""}, {"index": 7, "records": b""}, {"index": 1, "records": GOOD}]}]}
    with broker(tmp_path / "b", express=False) as (server, loop, port):
        before = logs(server, loop)
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(codec.encode_request(0, 9, 1, "validate-test", body))
            head = _read(s, 4)
            answer = head + _read(s, struct.unpack(">i", head)[0])
        after = logs(server, loop)
    assert [c for c, _ in _codes(answer, 9)] == [Errors.INVALID_RECORD, Errors.UNKNOWN_TOPIC_OR_PARTITION, 0]
    assert after[(TOPIC, 0)] == before[(TOPIC, 0)] and len(after[(TOPIC, 1)]) == len(before[(TOPIC, 1)]) + len(GOOD)


# ---- acks=0: an error closes the connection ---------------------------------------------------

def _served_until_closed(port: int, frames: list[tuple[bytes, int]], pipelined: bool,
                         closing_s: float = 1.0) -> tuple[list[bytes], bool]:
    """(the answers read, whether the broker closed the connection within `closing_s` after
    them; 0: not looked at) for `frames` on one connection."""
    got = []
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if pipelined:
                s.sendall(b"".join(f for f, _ in frames))
            for f, acks in frames:
                if not pipelined:
                    s.sendall(f)
                    time.sleep(0.02)        # the broker's close, if any, before the next frame
                if acks:
                    head = _read(s, 4)
                    if head is None:
                        return got, True
                    got.append(head + _read(s, struct.unpack(">i", head)[0]))
            if not closing_s:
                return got, False
            s.settimeout(closing_s)
            return got, _read(s, 1) is None
        except (ConnectionResetError, BrokenPipeError):
            return got, True
        except TimeoutError:
            return got, False


# kind -> (the acks=0 request with an error, the records it writes to partition 0 before the close)
ACKS0_ERRORS = {"empty records": (lambda: frame(4, acks=0, records=b""), 0),
                "two batches": (lambda: frame(4, acks=0, records=TWO), 0),
                "an internal topic": (lambda: frame(4, acks=0, topic="__consumer_offsets"), 0),
                "a partition the topic lacks, beside one it has": (lambda: frame_of_parts(4, [0, 7], acks=0), 2)}


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-at-a-time", "pipelined"])
@pytest.mark.parametrize("kind", list(ACKS0_ERRORS))
def test_an_acks_zero_request_with_an_error_closes_the_connection(tmp_path, kind, pipelined):
    """KafkaApis.handleProduceRequest, acks=0: an error on any partition closes the connection
    (closeConnection), else no answer (sendNoOpResponseExemptThrottle); the other partitions of
    the request are written first.  Three good acks=0 requests of two partitions (the express
    path learns the topic's shape: it serves the last kind itself), the bad one, then an acks=1
    request: closed, unanswered, and the request after the bad one never served."""
    bad, written = ACKS0_ERRORS[kind]
    for express in (True, False):
        with broker(tmp_path / f"{express}", express) as (server, loop, port):
            frames = [frame_of_parts(i, [0, 1], acks=0) for i in (1, 2, 3)] + [bad(), frame(5)]
            got, closed = _served_until_closed(port, frames, pipelined)
            end = _ends(server, loop)[0]
            taken = server.express.taken if express else 0
            still = _served_until_closed(port, [frame(6)], pipelined, closing_s=0)      # the broker goes on
        assert (got, closed) == ([], True), (express, kind)
        assert end == 2 + 3 * 2 + written, (express, kind)     # never the fifth request's three records
        assert taken == (2 + (written > 0) if express else 0)
        assert len(still[0]) == 1 and _codes(still[0][0], 9)[0][0] == Errors.NONE


@pytest.mark.parametrize("express", [True, False], ids=["express", "general"])
def test_acks_zero_without_an_error_keeps_the_connection(tmp_path, express):
    with broker(tmp_path / "ok", express) as (server, loop, port):
        got, closed = _served_until_closed(port, [frame(i, acks=0) for i in (1, 2, 3)] + [frame(4)], False)
    assert not closed and [c for c, _ in _codes(got[0], 9)] == [Errors.NONE]


def test_an_acks_zero_request_that_fails_as_a_whole_closes_the_connection(tmp_path, monkeypatch):
    """Kafka's getErrorResponse is null for acks=0, so handleError closes the connection: a
    handler that raises answers an acks=1 request (test_express) and closes an acks=0 one."""
    from storage.replication.replica import ReplicaManager

    def broken(self, request, callback=None):
        raise RuntimeError("injected")
    for express in (True, False):
        with broker(tmp_path / f"raise-{express}", express) as (server, loop, port):
            _served_until_closed(port, [frame(1, acks=0), frame(2)], False)     # learns the shape
            monkeypatch.setattr(ReplicaManager, "handle_produce", broken)
            got, closed = _served_until_closed(port, [frame(3, acks=0), frame(4)], False)
            monkeypatch.undo()
        assert (got, closed) == ([], True)


def test_an_acks_zero_request_refused_by_the_acls_closes_the_connection(tmp_path):
    """TOPIC_AUTHORIZATION_FAILED is an error in the response like any other (authz.split)."""
    from storage.wire.authorizer import Authorizer
    with broker(tmp_path / "acl", authorizer=Authorizer(super_users=())) as (server, loop, port):
        got, closed = _served_until_closed(port, [frame(1, acks=0), frame(2)], False)
    assert (got, closed) == ([], True)


# ---- real clients still produce ---------------------------------------------------------------------

def test_real_clients_produce_every_codec_at_acks_zero_one_and_all(tmp_path):
    """kafka-python and librdkafka, batching records (linger), each codec (zstd at Produce v7+,
    which they choose), acks 0, 1 and all: every record written, none refused, no connection closed."""
    ck = pytest.importorskip("confluent_kafka")
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    b = Broker(tmp_path / "data").start()
    try:
        want = {}
        for codec_name in ("none", "gzip", "zstd", "lz4", "snappy"):
            for acks in (0, 1, "all"):
                topic = f"kp-{codec_name}-{acks}"
                producer = KafkaProducer(bootstrap_servers=b.bootstrap, acks=acks, linger_ms=20,
                                         compression_type=None if codec_name == "none" else codec_name)
                for i in range(50):
                    producer.send(topic, value=b"v%d" % i)
                producer.flush(30)
                producer.close()
                want[topic] = 50
        delivered, failed = [], []
        for codec_name in ("none", "gzip", "zstd", "lz4", "snappy"):
            for acks in ("0", "1", "all"):
                topic = f"ck-{codec_name}-{acks}"
                producer = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": acks, "linger.ms": 20,
                                        "compression.type": codec_name})
                for i in range(50):
                    producer.produce(topic, value=b"v%d" % i,
                                     on_delivery=lambda err, msg: (failed if err else delivered).append(err or msg))
                assert producer.flush(30) == 0
                want[topic] = 50
        assert not failed and len(delivered) == 15 * 50
        consumer = KafkaConsumer(bootstrap_servers=b.bootstrap)
        partitions = [TopicPartition(t, 0) for t in want]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ends = consumer.end_offsets(partitions)
            if all(ends[p] == want[p.topic] for p in partitions):
                break
            time.sleep(0.2)
        consumer.close()
        assert {p.topic: ends[p] for p in partitions} == want
        assert "closing the connection" not in b.stderr()
    finally:
        b.stop()
