"""The broker's network front end on asyncio: Kafka's framing, one request at a time per
connection in arrival order (Kafka mutes a channel until its response is sent), the client APIs
of apis.py and groups.py, and the periodic work.

Bad input never reaches a log and never stops the broker: a frame beyond the size limit, a
negative size, an unknown API or version, or bytes kio cannot parse close that connection with
the reason logged (Kafka's InvalidRequestException path); an ApiVersions request of a version
this broker does not know gets Kafka's answer, UNSUPPORTED_VERSION with the supported ranges in
ApiVersions v0 (KIP-511).  A handler's own failure is answered as Kafka's getErrorResponse does
(error_answers: the exception's code, UNKNOWN_SERVER_ERROR unless it carries one, at the top
level or on every topic and partition asked for), logged once with its traceback, and the
connection stays open -- but for a Produce of acks=0, whose failure or error on any partition
closes the connection, as Kafka's does (later.Close): its producer reads no answer.

Connections and memory are bounded (limits.py, Kafka's settings): beyond max.connections or
max.connections.per.ip the newest connection is closed; one silent for connections.max.idle.ms
is closed; a frame's size is reserved against queued.max.request.bytes before its bytes are
read, as they arrive, and a frame not whole within request.timeout.ms closes its connection.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import signal
import socket
import ssl
import time

from ..core import errors
from ..replication.messages import error_name
from . import authz, codec, error_answers, fetch_answer, produce_codec, sasl, sendfile, session, tls
from .acl_control import AclApis
from .admin_apis import AdminApis
from .apis import ClientApis, Notifier
from .broker import MetadataSource
from .connection import Connection
from .express import NOT_MINE, ProduceExpress
from .groups import GroupCoordinator
from .groups_admin import GroupAdmin
from .later import MAX_LATER, Close, Later
from .limits import ACCEPT_BURST, ConnectionGate, ConnectionLimits, ConnectionTimeoutError, RequestMemory
from .listeners import Listener
from .scram import ScramApis
from .tls_accept import TlsListener
from .topic_admin import TopicAdminApis
from .txn_admin import TxnAdminApis
from .txn_coordinator import TxnCoordinator, TxnSettings

log = logging.getLogger("storage.wire")

TICK_SECONDS = 0.1


class FrameServer:
    """Kafka's framing and dispatch over `handlers` (API key -> async handler) for the APIs of
    `supported` (codec.SUPPORTED for a broker, codec.CONTROLLER_SUPPORTED for the controller)."""

    def __init__(self, supported: dict, limits: ConnectionLimits | None = None):
        self.supported = supported
        self.limits = (limits or ConnectionLimits()).resolved()
        self.gate = ConnectionGate(self.limits)
        self.memory = RequestMemory(self.limits.queued_max_request_bytes)
        self.handlers: dict = {}
        self._servers: list[asyncio.AbstractServer] = []     # one per listener
        # API key -> fn(key, version, correlation id, body) -> the frame (bytes, or
        # fetch_answer.Pieces); codec.encode_response for a key not here.
        self.encoders: dict = {}
        self._stopped = asyncio.Event()
        self._connections: set[Connection] = set()
        self._handlers: set[asyncio.Task] = set()       # the connection handlers running (_serve)
        self.served: collections.Counter = collections.Counter()    # (api key, version) -> requests
        self.handler_errors: collections.Counter = collections.Counter()  # (api key, version) -> raised
        # Requests other than ApiVersions wait while the node starts (a cluster broker opens its
        # log dir only once it has replayed the metadata log: the topics' configs come from it).
        self.ready = asyncio.Event()
        self.ready.set()
        self.observer = None        # --metrics-listen's request metrics (wire/metrics.py), when on
        self.express: ProduceExpress | None = None      # a broker's express path of a Produce (express.py)
        self.listener = session.Session()   # listen()'s default listener: its name and protocol
        self.tls: ssl.SSLContext | None = None      # the server side of the SSL and SASL_SSL listeners

    async def listen(self, host: str, port: int, listener: Listener | None = None) -> int:
        """Serve `listener` (default: self.listener's name and protocol) on host:port; the port
        bound.  A TLS listener needs self.tls."""
        template = session.Session(listener.name, listener.protocol) if listener is not None else self.listener
        if template.tls and self.tls is None:
            raise ValueError(f"the {template.protocol} listener {template.listener} needs ssl.keystore.location")

        loop = asyncio.get_running_loop()
        if template.tls:            # the handshake is the connection handler's first step (_handshake)
            def accepted(sock, peer):
                asyncio.get_running_loop().create_task(self._serve(None, template, sock))     # it joins _handlers
            server = await TlsListener.open(host, port, ACCEPT_BURST, accepted)
        else:
            def serve(connection: Connection):
                return self._serve(connection, template)
            server = await loop.create_server(lambda: Connection(serve), host or None, port, backlog=ACCEPT_BURST)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def serve_until_stopped(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopped.set()

    def stop_listening(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._connections):
            writer.close()
        log.info("served: %s", self.served_summary())
        if self.express is not None and self.express.taken:
            log.info("Produce requests served by the express path: %d", self.express.taken)
        if sendfile.stats:
            log.info("fetch records sent: %s", sendfile.summary())

    def served_summary(self) -> str:
        """`Produce v9 x12, Fetch v12 x40, ...`: which versions clients used, in API key order."""
        return ", ".join(f"{codec.api_name(k)} v{v} x{n}" for (k, v), n in sorted(self.served.items())) or "nothing"

    # ---- connections ----
    async def _serve(self, connection: Connection | None, template: session.Session | None = None,
                     sock: socket.socket | None = None) -> None:
        """One connection: admitted, its TLS handshake when it came in on a TLS listener (a
        socket not yet read from: tls_accept.py), then its requests until it ends."""
        peer = _peer(sock) if sock is not None else connection.transport.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) and peer else str(peer)
        refusal = self.gate.admit(ip)
        if refusal is not None:
            self._refuse(peer, refusal)
            (sock or connection.transport).close()
            return
        handler = asyncio.current_task()
        self._handlers.add(handler)
        try:
            state = self._session(ip, template or self.listener)
            if sock is not None:
                connection = await self._handshake(sock, peer)
                if connection is None:
                    return
                state.principal = tls.principal(connection.get_extra_info("ssl_object"))
            self._connections.add(connection)
            session.enter(state)
            await self._requests(connection)
        except sendfile.SliceCutError as exc:
            log.warning("closing connection from %s: %s", peer, exc)     # the client fetches again
        except (asyncio.IncompleteReadError, ConnectionError):
            pass                                            # the client went away
        except codec.ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except ConnectionTimeoutError as exc:
            log.info("closing connection from %s: %s", peer, exc)
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self.gate.leave(ip)
            self._handlers.discard(handler)
            if connection is not None:
                self._connections.discard(connection)
                connection.close()
            else:
                sock.close()

    async def _requests(self, connection: Connection) -> None:
        """One request at a time, in arrival order: its size (within connections.max.idle.ms of
        the last answer), its bytes (within request.timeout.ms of its size, gathered against
        queued.max.request.bytes), the answer (read by the client within connections.max.idle.ms).
        No await while the next frame is already whole in the buffer (connection.py)."""
        limits = self.limits
        idle = limits.connections_max_idle_ms / 1000
        idle_why = f"idle for connections.max.idle.ms={limits.connections_max_idle_ms}"
        unread_why = f"the client read no answer for connections.max.idle.ms={limits.connections_max_idle_ms}"
        request_s = limits.request_timeout_ms / 1000
        memory = self.memory
        connection.eager = functools.partial(self._now, connection)
        express = self.express.serve if self.express is not None else None
        while True:
            size = connection.next_size()
            if size is None:
                size = await connection.wait_size(idle, idle_why, unread_why)
                if size is None:                            # the client closed between requests:
                    await connection.later_below(1, idle, unread_why)     # the answers still to come go
                    return
            if size < 0 or size > codec.MAX_REQUEST_BYTES:
                raise codec.ProtocolError(f"request size {size} is outside 0..{codec.MAX_REQUEST_BYTES}")
            if not memory.try_reserve(size):
                connection.hold()                           # its bytes wait in the kernel
                connection.flush()
                await memory.reserve(size)
            try:
                frame = connection.take(size)
                if frame is None:
                    frame = await connection.gather(size, request_s, functools.partial(_not_whole, size, limits))
                response = express(frame) if express is not None else NOT_MINE
                if response is NOT_MINE:
                    response = await self._dispatch(frame)
                del frame
            finally:
                memory.release(size)
            if response is None:
                pass
            elif type(response) is bytes:
                if connection.answer(response):     # queued behind MAX_LATER answers still to come
                    await connection.later_below(MAX_LATER, idle, unread_why)
                if connection.writing_paused:
                    await connection.drain_within(idle, unread_why)
            elif isinstance(response, asyncio.Future):      # answered later, in this request's turn
                connection.answer_later(response)
                await connection.later_below(MAX_LATER, idle, unread_why)
            elif type(response) is Close:                   # the answers before it go, then the connection
                await connection.later_below(1, idle, unread_why)
                return
            else:
                await connection.later_below(1, idle, unread_why)      # the answers before it go first
                connection.flush()
                await self._send_pieces(connection, response, idle)
            if sasl.closing():              # a failed SASL exchange: its answer was the last
                return

    async def _send_pieces(self, connection: Connection, response, idle: float) -> None:
        """Send an answer in pieces (a Fetch's records left in their segment files, sent with
        sendfile: wire/sendfile.py) within connections.max.idle.ms; its descriptors go once sent."""
        try:
            async with asyncio.timeout(idle):       # not wait_for: on 3.11 that is a task per answer
                await sendfile.send(connection, response)
        except TimeoutError:
            raise ConnectionTimeoutError(
                f"the client read no answer for connections.max.idle.ms={self.limits.connections_max_idle_ms}"
            ) from None
        finally:
            response.close()

    def _session(self, ip: str, template: session.Session) -> session.Session:
        """A new connection's Session: the listener's name and protocol, not yet authenticated on
        a SASL listener."""
        return session.Session(listener=template.listener, protocol=template.protocol, client_host=ip,
                               authenticated=not template.sasl)

    async def _handshake(self, sock: socket.socket, peer) -> Connection | None:
        """The TLS handshake of a connection to an SSL or SASL_SSL listener, done by the loop
        within request.timeout.ms: its Connection, or None once a failure is logged in one line
        (the connection is closed; the broker goes on)."""
        loop = asyncio.get_running_loop()
        connection = Connection()
        try:
            await loop.connect_accepted_socket(lambda: connection, sock, ssl=self.tls,
                                               ssl_handshake_timeout=self.limits.request_timeout_ms / 1000)
        except (OSError, TimeoutError, EOFError) as exc:
            log.warning("TLS handshake with %s failed: %s", peer, tls.describe(exc))
            sock.close()
            return None
        return connection

    def _refuse(self, peer, reason: str) -> None:
        """Log a refused connection: the first, then one in 100 (a flood must not flood the log)."""
        if self.gate.refused % 100 == 1:
            log.warning("refused connection from %s: %s (%d refused so far)", peer, reason, self.gate.refused)

    async def _dispatch(self, frame: bytes) -> bytes | None:
        key, version, correlation_id = codec.peek_api(frame)
        if not codec.is_supported(key, version, self.supported):
            if key == codec.API_VERSIONS_KEY:
                body = ClientApis.api_versions_body(codec.UNSUPPORTED_VERSION, self.supported)
                return codec.encode_response(key, 0, correlation_id, body)
            raise codec.ProtocolError(f"unsupported request: {codec.api_name(key)} v{version}")
        if not sasl.allowed(key):     # Kafka: not allowed before authentication, the channel closes
            raise codec.ProtocolError(f"{codec.api_name(key)} before SASL authentication")
        header, request = codec.parse_request(frame)
        if not self.ready.is_set() and key != codec.API_VERSIONS_KEY:
            await self.ready.wait()
        self.served[(key, version)] += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s v%d #%d from %s: %s", codec.api_name(key), version, correlation_id, header.client_id,
                      str(request)[:300])
        started = time.perf_counter()
        try:
            body = await self.handlers[key](header, request)
            if type(body) is Later:     # its order-bound part ran: the connection reads on (later.py)
                return asyncio.ensure_future(self._answer_later(body, key, version, correlation_id, header, request,
                                                                started))
            return self.answer_body(body, key, version, correlation_id, started)
        except Exception as exc:
            return self.answer_failure(exc, key, version, correlation_id, header, request, started)

    def _now(self, connection: Connection, size: int, alone: bool = True) -> bool:
        """Serve the whole frame of `size` bytes at the head of `connection`'s buffer now, from the
        protocol's callback while the connection's task waits for its next request (Connection.
        _serve_eagerly, in the task's context): a Produce the express path takes (express.py),
        else one the fast reader takes, of a version
        served, once the node is ready and queued.max.request.bytes has room -- the one-record
        request answered one at a time pays no wake of the task.  Served as _requests serves it
        (counted, metrics, logs, error answers, Later); a handler that waits goes on in a task of
        its own, answered in its turn, and the connection's next request waits for it.  False:
        left to the task (anything else, or a frame it would refuse: its error path is there).
        A frame with more after it (not `alone`: pipelined) is served only by the express path."""
        view = connection.peek(size)
        if size < 8 or view[0] or view[1] != produce_codec.PRODUCE_KEY or size > codec.MAX_REQUEST_BYTES:
            return False
        frame = view.tobytes()
        if self.express is not None:        # it makes the checks below itself
            if not self.memory.has_room(size):
                return False                # the task waits for queued.max.request.bytes in turn
            try:
                response = self.express.serve(frame)
            except Exception:               # not even an error answer could be built: as below
                connection.skip(size)
                log.exception("closing connection from %s after an internal error",
                              connection.get_extra_info("peername"))
                connection.close()
                return False
            if response is not NOT_MINE:
                connection.skip(size)
                if response is not None:    # a Close: the frames after it are never served
                    connection.answer(response) if type(response) is bytes else connection.close_after_answers()
                return True
        if not alone:
            return False
        key, version = produce_codec.PRODUCE_KEY, view[2] << 8 | view[3]
        if not (codec.is_supported(key, version, self.supported) and sasl.allowed(key) and self.ready.is_set()):
            return False
        parsed = produce_codec.read_request(frame)
        if parsed is None or not self.memory.try_reserve(size):
            return False
        connection.skip(size)
        header, request = parsed
        correlation_id = header.correlation_id
        self.served[(key, version)] += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s v%d #%d from %s: %s", codec.api_name(key), version, correlation_id, header.client_id,
                      str(request)[:300])
        started = time.perf_counter()
        held = False
        try:
            step = self.handlers[key](header, request)
            try:
                waited = step.send(None)
            except StopIteration as stop:
                body = stop.value
                if type(body) is Later:
                    response = asyncio.ensure_future(self._answer_later(body, key, version, correlation_id, header,
                                                                        request, started))
                else:
                    response = self.answer_body(body, key, version, correlation_id, started)
            except Exception as exc:
                response = self.answer_failure(exc, key, version, correlation_id, header, request, started)
            else:
                held = True             # the frame's memory is held until its handler ends
                response = asyncio.ensure_future(self._rest(step, waited, size, key, version, correlation_id,
                                                            header, request, started))
                connection.running(response)
        except Exception:
            log.exception("closing connection from %s after an internal error", connection.get_extra_info("peername"))
            connection.close()
            return False
        finally:
            if not held:
                self.memory.release(size)
        if response is None:
            pass
        elif type(response) is bytes:
            connection.answer(response)
        else:
            connection.answer_later(response) if type(response) is not Close else connection.close_after_answers()
        return True

    async def _rest(self, step, waited, size: int, key: int, version: int, correlation_id: int, header, request,
                    started: float) -> bytes | None:
        """The answer of a request begun in _now whose handler waited for `waited`, built as a
        Later's (_answer_later); the frame's memory is held until then."""
        try:
            return await self._answer_later(Later(_resumed_body(step, waited)), key, version, correlation_id,
                                            header, request, started)
        finally:
            self.memory.release(size)

    def answer_failure(self, exc: Exception, key: int, version: int, correlation_id: int, header, request,
                       started: float) -> bytes | None:
        """The answer to a request whose handler raised `exc` (counted in the request metrics)."""
        if self.observer is not None:
            self.observer.failed(key, started, exc)
        return self._error_response(key, version, correlation_id, header, request, exc)

    def answer_body(self, body, key: int, version: int, correlation_id: int, started: float) -> bytes | Close | None:
        """The answer frame of a handler's `body` (None: no answer; a Close: none, and the
        connection closes), counted in the request metrics."""
        if type(body) is Close:
            return self._closing(body, key, correlation_id, started)
        if self.observer is not None:
            self.observer.answered(key, started, body)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("answer to #%d: %s", correlation_id, str(body)[:200])
        if body is None:
            return None
        return self.encoders.get(key, codec.encode_response)(key, version, correlation_id, body)

    def _closing(self, close: Close, key: int, correlation_id: int, started: float) -> Close:
        """A handler's Close (an acks=0 Produce that met an error), counted and logged as Kafka's
        KafkaApis does ("Closing connection due to error during produce request ...")."""
        if self.observer is not None:
            self.observer.answered(key, started, close.body)
        seen = [f"{t['name']}-{p['index']}: {error_name(p['error_code'])}"
                for t in close.body["responses"] for p in t["partition_responses"] if p["error_code"]]
        log.info("closing the connection: Produce #%d with acks=0 met an error (%s)", correlation_id, ", ".join(seen))
        return close

    async def _answer_later(self, later: Later, key: int, version: int, correlation_id: int, header, request,
                            started: float) -> bytes | None:
        """The answer of a request whose handler returned a Later, as _requests's.  An answer that
        cannot be built at all is logged here; the connection then closes (Connection.answer_later)."""
        try:
            try:
                return self.answer_body(await later.rest, key, version, correlation_id, started)
            except Exception as exc:
                return self.answer_failure(exc, key, version, correlation_id, header, request, started)
        except Exception:
            log.exception("closing a connection: no answer could be built for %s v%d (correlation id %d)",
                          codec.api_name(key), version, correlation_id)
            raise

    def _error_response(self, key: int, version: int, correlation_id: int, header, request, exc) -> bytes | None:
        """Kafka's getErrorResponse for a handler that raised: the API's response with the
        exception's code (a StorageError's own, with its text where a row has a message;
        INVALID_REQUEST for codec.InvalidRequestError -- a refusal, logged without a traceback,
        as the failure state's LogDirOfflineError is --; else UNKNOWN_SERVER_ERROR) where the
        response has one, else on every topic and partition asked for; logged once with its traceback;
        the connection stays open.  If even that answer cannot be built, the exception goes on
        and closes the connection."""
        code = getattr(exc, "error_code", errors.Errors.UNKNOWN_SERVER_ERROR)
        message = str(exc) if hasattr(exc, "error_code") else None      # an error Kafka names, not a bug
        what = f"{codec.api_name(key)} v{version} (correlation id {correlation_id}) from {header.client_id!r}"
        if isinstance(exc, codec.InvalidRequestError):      # the client's mistake, not a bug here
            log.warning("answering %s with INVALID_REQUEST: %s", what, exc)
        elif isinstance(exc, errors.LogDirOfflineError):    # the failure state, logged where it was entered
            log.warning("answering %s with KAFKA_STORAGE_ERROR: %s", what, exc)
        else:
            self.handler_errors[(key, version)] += 1
            log.error("answering %s with error code %d: the handler raised", what, code, exc_info=exc)
        if key == produce_codec.PRODUCE_KEY and getattr(request, "acks", None) == 0:
            return Close(None)      # Kafka's getErrorResponse is null for acks=0: the connection closes
        try:
            if key == codec.API_VERSIONS_KEY:
                return codec.encode_response(key, version, correlation_id,
                                             ClientApis.api_versions_body(int(code), self.supported))
            return codec.encode_error_response(key, version, correlation_id,
                                               error_answers.error_body(key, request, int(code), message))
        except Exception as answer_exc:
            answer_exc.add_note(f"while answering {what} after its handler raised {exc!r}")
            raise

    def unsent_bytes(self) -> int:
        """Bytes of answers not yet taken by the sockets, all connections together."""
        return sum(c.unsent_bytes() for c in self._connections)

    def running_handlers(self) -> list[asyncio.Task]:
        """The connection handlers still running, but for the calling task."""
        current = asyncio.current_task()
        return [t for t in self._handlers if t is not current and not t.done()]


async def _resumed_body(step, waited):
    """The body of a handler whose coroutine `step` waited for `waited` (a Later it returns, awaited)."""
    body = await _Resumed(step, waited)
    if type(body) is Later:
        body = await body.rest
    return body


class _Resumed:
    """Awaited in a task: the rest of a coroutine whose first step ran outside it and waited for
    `waited` (FrameServer._now); its value is the coroutine's."""

    __slots__ = ("step", "waited")

    def __init__(self, step, waited) -> None:
        self.step, self.waited = step, waited

    def __await__(self):
        step, waited = self.step, self.waited
        while True:
            try:
                sent = yield waited
            except BaseException as exc:        # noqa: BLE001 -- given to the coroutine, as a task does
                try:
                    waited = step.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    waited = step.send(sent)
                except StopIteration as stop:
                    return stop.value


def _peer(sock: socket.socket):
    try:
        return sock.getpeername()
    except OSError:                 # reset before it was served
        return "?"


class BrokerServer(FrameServer):
    def __init__(self, node, *, initial_rebalance_delay_ms: int = 3_000, limits: ConnectionLimits | None = None,
                 txn: TxnSettings | None = None):
        super().__init__(codec.SUPPORTED, limits)
        self.txn: TxnCoordinator | None = None
        self._txn_settings = txn
        self.node = node
        self.notifier = Notifier()
        self.apis = ClientApis(node, self.notifier)
        self.groups: GroupCoordinator | None = None
        self._initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._ticker: asyncio.Task | None = None
        a = self.apis
        self.encoders[fetch_answer.API_KEY] = fetch_answer.encode
        produce = a.produce
        self.express = ProduceExpress(self, a, produce)
        self.handlers = {0: produce, 1: a.fetch, 2: a.list_offsets, 3: a.metadata, 18: a.api_versions,
                         19: a.create_topics, 20: a.delete_topics, 22: a.init_producer_id,
                         23: a.offset_for_leader_epoch}
        admin = AdminApis(node)
        self.handlers.update({32: admin.describe_configs, 33: admin.alter_configs,
                              44: admin.incremental_alter_configs, 60: admin.describe_cluster})
        topic_admin = TopicAdminApis(node, self.notifier)
        self.handlers.update({21: topic_admin.delete_records, 35: topic_admin.describe_log_dirs,
                              37: topic_admin.create_partitions, 43: topic_admin.elect_leaders})
        self.txn_admin = TxnAdminApis(node, self.notifier)
        self.handlers.update({27: self.txn_admin.write_txn_markers, 61: self.txn_admin.describe_producers})
        acls = AclApis(node)
        self.handlers.update({29: acls.describe_acls, 30: acls.create_acls, 31: acls.delete_acls})
        self.sasl, users = sasl.SaslApis(node), ScramApis(node)
        self.handlers.update({17: self.sasl.sasl_handshake, 36: self.sasl.sasl_authenticate,
                              50: users.describe_user_scram_credentials, 51: users.alter_user_scram_credentials})

    def serve_groups(self) -> None:
        """The group coordinator and its APIs (it needs a running event loop for its timers)."""
        self.groups = GroupCoordinator(self.node, initial_rebalance_delay_ms=self._initial_rebalance_delay_ms)
        g = self.groups
        self.handlers.update({8: g.offset_commit, 9: g.offset_fetch, 10: g.find_coordinator, 11: g.join_group,
                              12: g.heartbeat, 13: g.leave_group, 14: g.sync_group, 28: g.txn_offset_commit})
        admin = GroupAdmin(g)
        self.handlers.update({15: admin.describe_groups, 16: admin.list_groups, 42: admin.delete_groups,
                              47: admin.offset_delete})
        self.txn_admin.on_written = g.complete_txn
        t = self.txn = TxnCoordinator(self.node, g, self.txn_admin, self.apis, self._txn_settings)
        self.handlers.update({10: t.find_coordinator, 22: t.init_producer_id, 24: t.add_partitions_to_txn,
                              25: t.add_offsets_to_txn, 26: t.end_txn, 65: t.describe_transactions,
                              66: t.list_transactions})
        self.handlers = authz.guard(self.handlers, self.node)     # ACLs on: every API's check first

    async def start(self) -> None:
        self.serve_groups()
        self.ready.clear()
        node = self.node
        if node.listeners is None:
            node.listeners = [Listener("PLAINTEXT", "PLAINTEXT", node.bind_host, node.port, node.host)]
        for listener in node.listeners:
            listener.port = await self.listen(listener.host, listener.port, listener)
        node.host, node.port = node.listeners[0].endpoint()[1:3]      # the inter-broker listener's
        await self.node.start(self.notifier)
        self.ready.set()
        self._ticker = asyncio.create_task(self._tick())
        log.info("node %d listening on %s:%d", self.node.node_id, self.node.host, self.node.port)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                await self.node.tick()
                self.groups.tick()
                self.txn.tick()
            except errors.LogDirOfflineError as exc:
                log.error("the log dir is offline: %s", exc)
            if self.node.logdir.offline:
                # Kafka halts a broker whose last log dir failed; nothing more is acknowledged.
                log.critical("log dir %s is offline: the broker stops", self.node.logdir.path)
                self._stopped.set()
                return

    async def close(self) -> None:
        """The controlled shutdown while still serving (KIP-841: leaderships move away and the
        requests waiting on them are answered NOT_LEADER_OR_FOLLOWER, so clients go to the new
        leaders), then stop listening and close the node."""
        await self.node.controlled_shutdown()
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)     # ended, not left cancelled
        if self.txn is not None:
            await self.txn.close()
        self.stop_listening()
        await _connections_end(self)
        await self.node.shutdown()


def _not_whole(size: int, limits: ConnectionLimits, got: int) -> str:
    return f"a request of {size} bytes was not whole within request.timeout.ms={limits.request_timeout_ms} ({got} bytes arrived)"


CONNECTIONS_END_S = 2.0      # a fetch's long poll is 0.5 s for every client we know


async def _connections_end(server: FrameServer, timeout_s: float = CONNECTIONS_END_S) -> None:
    """Wait for `server`'s connection handlers to end on their own once stop_listening closed
    their sockets (a handler waiting for a request sees the end of the stream; one answering a
    request finishes it).  A handler still running when asyncio.run ends is cancelled there,
    and asyncio's stream protocol (3.11) logs a cancelled handler as an ERROR with a
    CancelledError traceback, so none is left to it: after `timeout_s` the rest are cancelled
    here and their cancellation is consumed."""
    handlers = server.running_handlers()
    if not handlers:
        return
    _, late = await asyncio.wait(handlers, timeout=timeout_s)
    for task in late:
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)


def _shutdown_exception_handler(loop, context) -> None:
    """During shutdown a cancellation is what was asked for, not an error (asyncio's stream
    protocol reports a cancelled connection handler through the loop's exception handler)."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        log.debug("cancelled at shutdown: %s", context.get("message"))
        return
    loop.default_exception_handler(context)


async def serve(server: "FrameServer", ready=None) -> None:
    """Start `server`, call `ready(server)`, serve until SIGTERM or SIGINT (a controlled
    shutdown), then close it; SIGKILL is a crash."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    try:
        await server.start()
        if ready is not None:
            ready(server)
        await server.serve_until_stopped()
    finally:
        log.info("shutting down")
        loop.set_exception_handler(_shutdown_exception_handler)
        try:
            await server.close()
        finally:
            await _connections_end(server)


async def run(node: MetadataSource, *, initial_rebalance_delay_ms: int = 3_000, ready=None,
              limits: ConnectionLimits | None = None, txn: TxnSettings | None = None,
              tls: ssl.SSLContext | None = None) -> None:
    """A broker on `node` until SIGTERM or SIGINT (`tls`: its SSL and SASL_SSL listeners' context)."""
    server = BrokerServer(node, initial_rebalance_delay_ms=initial_rebalance_delay_ms, limits=limits, txn=txn)
    server.tls = tls
    await serve(server, ready)
