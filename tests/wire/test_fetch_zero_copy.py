"""A Fetch's records sent from their segment files with os.sendfile (issue 33, zero-copy fetch;
Kafka's FileRecords.writeTo): through a real loopback socket to an embedded broker in this
process, so the sendfile calls can be counted; the bytes a client gets are the codec's for the
same answer.  What happens when retention deletes the segment, or a truncation cuts it, between
the read and the send; whole batches at the size limit; TLS and an event loop without sendfile
copy instead."""
from __future__ import annotations

import asyncio
import os
import socket
import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.core.config import LogConfig  # noqa: E402
from storage.core.records import build_batch, iter_batches  # noqa: E402
from storage.log.file_slice import FileSlice  # noqa: E402
from storage.wire import codec, fetch_answer, sendfile  # noqa: E402
from storage.wire.node import Node  # noqa: E402
from storage.wire.server import BrokerServer  # noqa: E402

VALUE = b"z" * 1000
BATCH_RECORDS = 16          # about 16 KiB a batch
BATCHES = 12


def _fetch_body(offset: int, topic_id: int, partition_max_bytes: int = 8 << 20, isolation_level: int = 0) -> dict:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 50 << 20,
            "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "t", "topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


class Embedded:
    """A Node and its BrokerServer listening on loopback, on this test's event loop."""

    def __init__(self, path, loop: asyncio.AbstractEventLoop, **config):
        self.loop = loop
        self.node = Node(path, offsets_partitions=1, log_config=LogConfig(fsync=False, **config), background=False)
        self.server = BrokerServer(self.node, initial_rebalance_delay_ms=0)
        self.port = loop.run_until_complete(self.server.listen("127.0.0.1", 0))
        loop.run_until_complete(self.node.create_topic("t", 1, 1))

    def produce(self, batches: int) -> None:
        for _ in range(batches):
            frame = codec.encode_request(0, 9, 1, "p", {"transactional_id": None, "acks": -1, "timeout": 1000,
                                                        "topic_data": [{"name": "t", "partition_data": [
                                                            {"index": 0, "records": build_batch([VALUE] * BATCH_RECORDS)}]}]})
            answer = self.loop.run_until_complete(self.server._dispatch(frame[4:]))
            assert codec.decode_response(0, 9, answer[4:])[1].responses[0].partition_responses[0].error_code == 0

    @property
    def log(self):
        return self.node.manager.partitions[("t", 0)].log

    async def exchange(self, frame: bytes) -> bytes:
        """One request over a new loopback connection; the response frame with its size."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(frame)
            await writer.drain()
            head = await reader.readexactly(4)
            return head + await reader.readexactly(struct.unpack(">i", head)[0])
        finally:
            writer.close()

    def fetch(self, version: int, offset: int = 0, **kw) -> bytes:
        frame = codec.encode_request(1, version, 7, "c", _fetch_body(offset, self.node.topic_id("t"), **kw))
        return self.loop.run_until_complete(asyncio.wait_for(self.exchange(frame), 20))

    def close(self) -> None:
        self.server.stop_listening()
        self.loop.run_until_complete(self.node.shutdown())


@pytest.fixture
def embedded(tmp_path):
    loop = asyncio.new_event_loop()
    e = Embedded(tmp_path / "node", loop)
    e.produce(BATCHES)
    yield e
    e.close()
    loop.close()


@pytest.fixture
def sendfile_calls(monkeypatch):
    """Every os.sendfile call asyncio makes: (file descriptor, offset, count, sent)."""
    calls, real = [], os.sendfile

    def counting(out_fd, in_fd, offset, count):
        sent = real(out_fd, in_fd, offset, count)
        calls.append((in_fd, offset, count, sent))
        return sent
    monkeypatch.setattr(os, "sendfile", counting)
    return calls


def _records(frame: bytes, version: int) -> bytes:
    partition = codec.decode_response(1, version, frame[4:])[1].responses[0].partitions[0]
    assert partition.error_code == 0
    return bytes(partition.records or b"")


def _expected(embedded: Embedded, offset: int, max_bytes: int = 8 << 20) -> bytes:
    """The records the engine's read gives (whole batches)."""
    return bytes(embedded.log.read(offset, max_bytes, max_offset=embedded.log.high_watermark))


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_records_go_by_sendfile_and_arrive_as_the_engine_read_them(embedded, sendfile_calls, version):
    before = dict(sendfile.stats)
    frame = embedded.fetch(version)
    expected = _expected(embedded, 0)
    assert len(expected) > fetch_answer.SENDFILE_MIN_BYTES
    assert _records(frame, version) == expected
    # One sendfile call at least, and together they sent the records (the header went by write).
    assert sendfile_calls and sum(c[3] for c in sendfile_calls) == len(expected)
    assert sendfile.stats["sendfile_bytes"] - before.get("sendfile_bytes", 0) == len(expected)
    assert sendfile.stats["copied_bytes"] == before.get("copied_bytes", 0)


def test_small_records_are_copied_into_the_frame(embedded, sendfile_calls):
    frame = embedded.fetch(12, partition_max_bytes=1)       # one batch (KIP-74): below the threshold
    one = _expected(embedded, 0, 1)
    assert len(one) < fetch_answer.SENDFILE_MIN_BYTES and _records(frame, 12) == one
    assert sendfile_calls == []


def test_without_sendfile_the_same_bytes(embedded, sendfile_calls, monkeypatch):
    """The control: the broker's frame with and without the sendfile path is the same."""
    with_sendfile = embedded.fetch(13)
    monkeypatch.setattr(fetch_answer, "SENDFILE_MIN_BYTES", 1 << 40)
    calls = len(sendfile_calls)
    assert embedded.fetch(13) == with_sendfile and len(sendfile_calls) == calls


def test_whole_batches_at_the_size_limit(embedded, sendfile_calls):
    """The engine answers whole batches (Kafka sends the bytes up to the limit, a partial last
    batch the consumer drops; ours stops at the last whole one): a limit that cuts the third
    batch sends two, and a first batch larger than the limit is sent whole (KIP-74)."""
    everything = _expected(embedded, 0)
    batch_bytes = len(everything) // BATCHES
    got = _records(embedded.fetch(12, partition_max_bytes=int(batch_bytes * 2.5)), 12)
    assert got == everything[:2 * batch_bytes]
    assert [b.base_offset for b in iter_batches(got)] == [0, BATCH_RECORDS]
    assert _records(embedded.fetch(12, partition_max_bytes=100), 12) == everything[:batch_bytes]


async def _serve_pieces(pieces, mutate=None, send_buffer_bytes: int | None = None, tls=None):
    """Send `pieces` with sendfile.send over a loopback connection (after `mutate()`); what
    the peer received, and the exception the sender met (or None)."""
    done = asyncio.get_running_loop().create_future()

    async def handle(reader, writer):
        try:
            if send_buffer_bytes is not None:
                writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
            if mutate is not None:
                mutate()
            await sendfile.send(writer, pieces)
            done.set_result(None)
        except Exception as exc:       # noqa: BLE001 -- handed to the test
            done.set_result(exc)
        finally:
            pieces.close()
            writer.close()
    server_tls, client_tls = tls or (None, None)
    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_tls)
    client = socket.socket()
    if send_buffer_bytes is not None:
        # On loopback a sent segment leaves the sender's buffer at once: what bounds one
        # sendfile call is the peer's window, so the peer's receive buffer is made small too
        # (before connect, so the window scale agrees).
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, send_buffer_bytes)
    client.setblocking(False)
    await asyncio.get_running_loop().sock_connect(client, server.sockets[0].getsockname())
    reader, writer = await asyncio.open_connection(sock=client, ssl=client_tls,
                                                   server_hostname="127.0.0.1" if client_tls else None)
    received = await reader.read()
    writer.close()
    server.close()
    return received, await done


def _answer(embedded, version: int = 12):
    view = embedded.log.read(0, 8 << 20)
    found = embedded.log.file_slice(view)
    assert isinstance(found, FileSlice)
    body = {"error_code": 0, "session_id": 0, "responses": [{"topic": "t", "topic_id": 1, "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 1, "aborted_transactions": None,
         "records": found}]}]}
    return fetch_answer.encode(1, version, 3, body), bytes(view)


def test_a_segment_deleted_by_retention_between_read_and_send_still_sends_its_bytes(tmp_path, sendfile_calls):
    loop = asyncio.new_event_loop()
    e = Embedded(tmp_path / "node", loop, segment_bytes=64 * 1024)
    try:
        e.produce(BATCHES)
        assert len(e.log.segments) > 1
        pieces, records = _answer(e)
        expected = pieces.join()
        path = e.log.segments[0].log_path
        received, error = loop.run_until_complete(_serve_pieces(pieces, lambda: _retire(e)))
        assert not any(os.path.exists(path + suffix) for suffix in ("", ".deleted")), "deleted before the send"
        assert error is None and received == expected and records in received
        assert sendfile_calls
    finally:
        e.close()
        loop.close()


def _retire(e: Embedded) -> None:
    """Retention (DeleteRecords' path) removes every segment below the last, files and all."""
    log = e.log
    assert log.increment_log_start_offset(log.segments[-1].base_offset)
    log.delete_pending_files(now_ms=2**62)


def test_a_slice_larger_than_the_socket_takes_goes_on_by_loop_sendfile(embedded, sendfile_calls):
    """The first os.sendfile fills a small send buffer; asyncio's loop.sendfile sends the rest
    as the peer reads."""
    pieces, _ = _answer(embedded)
    expected = pieces.join()
    received, error = embedded.loop.run_until_complete(_serve_pieces(pieces, send_buffer_bytes=4096))
    assert error is None and received == expected
    # The first call was cut short by the small buffers and later calls sent the rest.
    assert len(sendfile_calls) >= 2 and sendfile_calls[0][3] < sendfile_calls[0][2]
    assert sum(c[3] for c in sendfile_calls) == len(pieces.slices()[0])


def test_a_cut_before_the_send_sends_the_bytes_read_from_the_view(embedded, sendfile_calls):
    pieces, records = _answer(embedded)
    expected = pieces.join()

    def cut_and_regrow():
        embedded.log.truncate_to(BATCH_RECORDS)         # the follower's truncation
        embedded.log.append_as_follower(build_batch([b"other" * 300] * BATCH_RECORDS, base_offset=BATCH_RECORDS))
    received, error = embedded.loop.run_until_complete(_serve_pieces(pieces, cut_and_regrow))
    assert error is None and received == expected and sendfile_calls == []


def test_a_cut_while_sending_closes_the_connection(embedded, monkeypatch):
    pieces, _ = _answer(embedded)
    real = os.sendfile

    def cutting(out_fd, in_fd, offset, count):
        sent = real(out_fd, in_fd, offset, count)
        embedded.log.truncate_to(BATCH_RECORDS)
        return sent
    monkeypatch.setattr(os, "sendfile", cutting)
    received, error = embedded.loop.run_until_complete(_serve_pieces(pieces))
    assert isinstance(error, sendfile.SliceCutError)
    assert len(received) < len(pieces)


def test_an_event_loop_without_sendfile_copies(embedded, sendfile_calls, monkeypatch):
    monkeypatch.setattr(sendfile, "native", lambda writer: False)
    pieces, _ = _answer(embedded)
    expected = pieces.join()
    received, error = embedded.loop.run_until_complete(_serve_pieces(pieces))
    assert error is None and received == expected and sendfile_calls == []


@pytest.mark.parametrize("send_buffer_bytes", [None, 4096], ids=["socket-takes-all", "small-socket-buffer"])
def test_uvloop_sends_what_the_socket_takes_by_sendfile_and_copies_the_rest(embedded, sendfile_calls,
                                                                           send_buffer_bytes):
    """uvloop's loop.sendfile raises NotImplementedError (AbstractEventLoop's), so it cannot wait
    for room: a slice goes by one os.sendfile straight to the socket, what the socket did not
    take is copied from the slice's view, and the answer is whole (`storage serve --event-loop
    uvloop` serves Fetch, zero-copy as far as the socket takes it)."""
    uvloop = pytest.importorskip("uvloop")
    pieces, _ = _answer(embedded)
    expected, length = pieces.join(), len(pieces.slices()[0])
    before = dict(sendfile.stats)
    loop = uvloop.new_event_loop()
    try:
        assert loop.run_until_complete(_native_here()) and not loop.run_until_complete(_by_loop_here())
        received, error = loop.run_until_complete(_serve_pieces(pieces, send_buffer_bytes=send_buffer_bytes))
    finally:
        loop.close()
    assert error is None and received == expected
    assert len(sendfile_calls) == 1 and sendfile_calls[0][3] > 0
    by_sendfile = sendfile.stats["sendfile_bytes"] - before.get("sendfile_bytes", 0)
    copied = sendfile.stats["copied_bytes"] - before.get("copied_bytes", 0)
    assert by_sendfile == sendfile_calls[0][3] and by_sendfile + copied == length
    if send_buffer_bytes is not None:
        assert copied > 0, "a 4 KiB socket buffer took the whole slice at once"


async def _by_loop_here() -> bool:
    return sendfile.loop_sendfile()


async def _native_here() -> bool:
    class Writer:
        @staticmethod
        def get_extra_info(name):
            return None
    return sendfile.native(Writer())


def test_out_of_descriptors_the_view_is_sent_instead(embedded, sendfile_calls, monkeypatch):
    """A fetch of many partitions holds a descriptor per slice until sent: when none is left
    (EMFILE), the records are the view, copied when sent, and the answer is the same."""
    expected = embedded.fetch(12)

    def no_descriptor(fd):
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(os, "dup", no_descriptor)
    calls = len(sendfile_calls)
    assert embedded.fetch(12) == expected and len(sendfile_calls) == calls


def _tls_contexts(tmp_path):
    """(server, client) SSL contexts over a self-signed certificate for 127.0.0.1."""
    import datetime
    import ipaddress
    import ssl

    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    client = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
    return server, client


def test_a_tls_connection_copies_what_sendfile_cannot_encrypt(embedded, sendfile_calls, tmp_path):
    """On TLS the kernel cannot send the file's bytes as they are: the slices are written from
    their views, encrypted by the transport, and the client decrypts the same answer."""
    pieces, _ = _answer(embedded)
    expected = pieces.join()
    before = sendfile.stats["copied_bytes"]
    received, error = embedded.loop.run_until_complete(_serve_pieces(pieces, tls=_tls_contexts(tmp_path)))
    assert error is None and received == expected and sendfile_calls == []
    assert sendfile.stats["copied_bytes"] - before == len(pieces.slices()[0])
