"""A Fetch answer's records below fetch_answer.SENDFILE_MIN_BYTES are not sent by a sendfile
between two small writes (bench_fetch_floor.py measured the difference): up to
fetch_answer.COPY_BYTES of an answer's records are copied into its frame (one bytes object, one
write), and records beyond that budget leave as views of the segment's mapping, written with the
bytes around them in one transport.writelines (one writev on uvloop).  Unmodified clients read
every record of such answers on both event loops, and the broker's summary at its stop counts
no sendfile call."""
from __future__ import annotations

import asyncio
import re
import time

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio (pip install kio)")
ck = pytest.importorskip("confluent_kafka")

from storage.wire import fetch_answer, sendfile  # noqa: E402
from tests.wire_support import Broker, kafka_python_values  # noqa: E402

COUNT = 1500                 # 1 KiB values in 16 KiB batches
VALUE = b"%06d" + b"w" * 1018
PARTITION_MAX_BYTES = 100_000   # answers of ~96 KiB records: above OWN_PIECE_BYTES, below SENDFILE_MIN_BYTES
SENT = re.compile(r"fetch records sent: [\d.]+ (?:MiB|B) by sendfile in (\d+) calls")


class _Transport:
    def __init__(self):
        self.calls: list = []

    def write(self, data) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, parts) -> None:
        self.calls.append(("writelines", [bytes(p) for p in parts]))

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


class _Writer:
    """What sendfile.send uses of a connection, recording its writes."""

    def __init__(self, tls: bool = False):
        self.transport = _Transport()
        self.tls = tls
        self.flushed = 0

    def get_extra_info(self, name, default=None):
        return object() if name == "sslcontext" and self.tls else default

    def write(self, data) -> None:
        self.transport.write(data)

    def flush(self) -> None:
        self.flushed += 1

    async def drain(self) -> None:
        return None


def _pieces():
    records = memoryview(b"r" * (fetch_answer.OWN_PIECE_BYTES * 3))
    return fetch_answer.Pieces([bytearray(b"header"), records, bytearray(b"\0\0\0")]), records


def test_an_answer_without_slices_goes_in_one_writelines():
    pieces, records = _pieces()
    writer = _Writer()
    asyncio.run(sendfile.send(writer, pieces))
    assert writer.transport.calls == [("writelines", [b"header", bytes(records), b"\0\0\0"])]
    assert writer.flushed == 1          # the connection's held answers went first


def test_on_tls_each_part_is_written_as_before():
    """The control: a TLS connection (the layer copies as it encrypts) writes part by part."""
    pieces, records = _pieces()
    writer = _Writer(tls=True)
    asyncio.run(sendfile.send(writer, pieces))
    assert writer.transport.calls == [("write", b"header"), ("write", bytes(records)), ("write", b"\0\0\0")]


def _body(*records) -> dict:
    return {"error_code": 0, "session_id": 0, "responses": [{"topic": "t", "topic_id": 1, "partitions": [
        {"partition_index": i, "error_code": 0, "high_watermark": 1, "aborted_transactions": None, "records": r}
        for i, r in enumerate(records)]}]}


def test_records_within_the_copy_budget_are_copied_into_one_frame():
    assert PARTITION_MAX_BYTES < fetch_answer.OWN_PIECE_BYTES <= fetch_answer.COPY_BYTES <= fetch_answer.SENDFILE_MIN_BYTES
    records = memoryview(b"m" * PARTITION_MAX_BYTES)
    frame = fetch_answer.encode(1, 16, 3, _body(records))
    assert type(frame) is bytes and bytes(records) in frame


def test_records_beyond_the_copy_budget_are_pieces_of_their_own():
    """Two partitions of ~96 KiB: the first is copied, the second would pass COPY_BYTES and
    travels as the view it is (the Python copies of one answer stay bounded)."""
    first, second = memoryview(b"1" * PARTITION_MAX_BYTES), memoryview(b"2" * PARTITION_MAX_BYTES)
    pieces = fetch_answer.encode(1, 16, 3, _body(first, second))
    assert type(pieces) is fetch_answer.Pieces
    assert [p for p in pieces.parts if p is second] == [second]
    assert not any(p is first for p in pieces.parts) and bytes(first) in bytes(pieces.parts[0])


@pytest.fixture(params=["uvloop", "asyncio"])
def broker(request, tmp_path):
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    b = Broker(tmp_path / "data", "--event-loop", request.param).start()
    yield b
    b.kill()


def _ck_consume(bootstrap: str, want: int) -> list[tuple[int, bytes]]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "writev", "enable.auto.commit": False,
                            "max.partition.fetch.bytes": PARTITION_MAX_BYTES})
    consumer.assign([ck.TopicPartition("mid", 0, 0)])
    got, deadline = [], time.monotonic() + 60
    while len(got) < want and time.monotonic() < deadline:
        for m in consumer.consume(1000, 1.0):
            if not m.error():
                got.append((m.offset(), m.value()))
    consumer.close()
    return got


def test_clients_read_answers_written_in_one_writev(broker):
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 16 * 1024,
                            "compression.type": "none"})
    for i in range(COUNT):
        producer.produce("mid", VALUE % i)
        producer.poll(0)
    assert producer.flush(60) == 0
    got = _ck_consume(broker.bootstrap, COUNT)
    assert got == [(i, VALUE % i) for i in range(COUNT)]

    assert kafka_python_values(broker.bootstrap, "mid", COUNT, PARTITION_MAX_BYTES) == [VALUE % i for i in range(COUNT)]

    broker.stop()
    # No answer went by sendfile (a summary is logged only once something did).
    assert [int(calls) for calls in SENT.findall(broker.stderr())] in ([], [0])
