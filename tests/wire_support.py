"""Start and stop `python -m storage serve` processes for the wire tests: loopback only, a free
port chosen by the broker (port 0), bounded waits, and every process stopped by its pid."""
from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from storage.inspect.compare import local_comparison

# The wire guide: its serve command, client example and compatibility table are checked here.
GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide-broker.md"
_READY = re.compile(r"(?:node|controller) (\d+) listening on ([\d.]+):(\d+) pid (\d+)")


def event_loop_flag(command: str, extra=()) -> list[str]:
    """`--event-loop X` for a serve or controller process when STORAGE_TEST_EVENT_LOOP names a loop
    (auto, asyncio, uvloop: the wire tests run on either) and the test does not choose its own."""
    loop = os.environ.get("STORAGE_TEST_EVENT_LOOP")
    if not loop or command not in ("serve", "controller") or "--event-loop" in extra:
        return []
    return ["--event-loop", loop]


@contextlib.contextmanager
def loop_thread(server, loop: asyncio.AbstractEventLoop, *, closing=None):
    """An in-process `server` (a FrameServer made for `loop`) listening on 127.0.0.1 while `loop`
    runs in a thread of its own: yields its port.  At the end the server stops listening, the loop
    stops, its tasks are cancelled and awaited, `closing()` (a coroutine, if given) runs on it and
    the loop is closed."""
    port = loop.run_until_complete(server.listen("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        def stop():
            server.stop_listening()
            loop.stop()
        loop.call_soon_threadsafe(stop)
        thread.join(10)
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:     # gather() of nothing makes a future on another loop
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        if closing is not None:
            loop.run_until_complete(closing())
        loop.close()


def on_loop(loop: asyncio.AbstractEventLoop, fn):
    """fn() called on a loop_thread's loop (its state is the loop's): its value."""
    async def call():
        return fn()
    return asyncio.run_coroutine_threadsafe(call(), loop).result(10)


def send_quietly(s: socket.socket, data: bytes) -> None:
    """sendall that stops quietly when the server closes the connection."""
    with contextlib.suppress(OSError):
        s.sendall(data)


def kafka_python_values(bootstrap: str, topic: str, count: int, max_partition_fetch_bytes: int,
                        deadline_s: float = 60) -> list:
    """The values kafka-python's consumer reads from partition 0 of `topic` from its start, until
    `count` (or `deadline_s` passed)."""
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=max_partition_fetch_bytes, consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    values, deadline = [], time.monotonic() + deadline_s
    while len(values) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            values.extend(r.value for r in batch)
    consumer.close()
    return values


class Broker:
    """One broker process on `data_dir` (`command` "controller": a controller process)."""

    # A serve process's options unless a test sets others (() runs the defaults, as the wire guide).
    options = ("--group-initial-rebalance-delay-ms", "0", "--offsets-partitions", "5", "--no-fsync")

    def __init__(self, data_dir, *extra: str, command: str = "serve", preexec_fn=None):
        self.data_dir = str(data_dir)
        self.preexec_fn = preexec_fn              # run in the child before exec (a resource limit)
        self.extra = extra
        self.command = command
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.data_dir + ".stderr")
        self.host, self.port, self.pid = "127.0.0.1", 0, 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "Broker":
        return self.launch().wait_ready(timeout)

    def launch(self) -> "Broker":
        """Start the process without waiting for it (wait_ready then reads its ready line): a
        cluster launches all its brokers, then waits for each, so they start side by side."""
        listen = ["--listen", f"127.0.0.1:{self.port}"]    # the same port again after a restart
        if "--listeners" in self.extra:
            listen = []                            # the test names its listeners
        stderr = open(self.log_path, "ab")
        options = list(self.options) if self.command == "serve" else []
        options += event_loop_flag(self.command, self.extra)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "storage", self.command, "--data-dir", self.data_dir, *listen,
             *options, "--log-level", os.environ.get("STORAGE_WIRE_LOG_LEVEL", "INFO"), *self.extra],
            stdout=subprocess.PIPE, stderr=stderr, text=True, preexec_fn=self.preexec_fn)
        stderr.close()
        return self

    def wait_ready(self, timeout: float = 30.0) -> "Broker":
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line or self.proc.poll() is not None:
                break
        found = _READY.search(line or "")
        if not found:
            self.kill()
            raise RuntimeError(f"broker did not start ({line!r}); stderr:\n{self.stderr()[-3000:]}")
        self.host, self.port, self.pid = found.group(2), int(found.group(3)), int(found.group(4))
        self.listeners = {}         # name -> (protocol, "HOST:PORT"), each listener's own line
        if "--listeners" in self.extra:
            for _ in self.extra[self.extra.index("--listeners") + 1].split(","):
                _, name, protocol, _, address = self.proc.stdout.readline().split()
                self.listeners[name] = (protocol, address)
        return self

    def stderr(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (a controlled shutdown), then SIGKILL if it does not end in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        code = self.proc.returncode
        self.proc.stdout.close()
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self.proc is not None:
            self.proc.stdout.close()
            self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def raw_exchange(address: tuple[str, int], frame: bytes, timeout: float = 10.0) -> bytes | None:
    """Send one frame; the response frame (without its size), or None if the broker closed
    the connection."""
    with socket.create_connection(address, timeout=timeout) as s:
        s.sendall(frame)
        head = _read(s, 4)
        if head is None:
            return None
        return _read(s, struct.unpack(">i", head)[0])


def _read(s: socket.socket, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def served_versions(stderr: str) -> dict[str, set[int]]:
    """API name -> versions a broker served, from its shutdown line `served: Produce v9 x3, ...`."""
    found = re.findall(r"served: (.*)", stderr)
    out: dict[str, set[int]] = {}
    for line in found:
        for name, version in re.findall(r"(\w+) v(\d+) x\d+", line):
            out.setdefault(name, set()).add(int(version))
    return out


def readme_table() -> dict[str, dict[str, str]]:
    """The wire guide's compatibility table: API -> column -> cell."""
    text = GUIDE.read_text()
    start = text.index("| API | key | versions served |")
    lines = []
    for line in text[start:].splitlines():
        if not line.startswith("|"):
            break
        lines.append(line)
    columns = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(columns, cells))
    return rows


SESSION_MS = 3000


class Cluster:
    """A controller and `brokers` broker processes on loopback (confluent-kafka drives them)."""

    def __init__(self, root, brokers: int = 3, min_isr: int = 2, controller_args=(), broker_args=()):
        self.root = root
        self.min_isr = min_isr
        self.controller = Broker(root / "controller", "--min-insync-replicas", str(min_isr),
                                 "--session-timeout-ms", str(SESSION_MS), *controller_args, command="controller").start()
        address = f"127.0.0.1:{self.controller.port}"
        self.brokers = {n: Broker(root / f"broker-{n}", "--node-id", str(n), "--controller", address,
                                  "--replication-factor", "3", "--min-insync-replicas", str(min_isr),
                                  "--replica-lag-time-max-ms", "3000", *broker_args) for n in range(1, brokers + 1)}
        try:
            self.start_brokers()
        except BaseException:
            self.kill()
            raise

    def start_brokers(self, brokers=None) -> None:
        """Start these brokers (all by default) side by side: all launched, then each waited for
        (a broker takes seconds to import and register; one after another that was most of a
        cluster test's setup)."""
        brokers = list(self.brokers.values()) if brokers is None else list(brokers)
        for b in brokers:
            b.launch()
        for b in brokers:
            b.wait_ready()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive())

    def admin(self):
        from confluent_kafka.admin import AdminClient
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create(self, topic: str, partitions: int, replication_factor: int = 3, config: dict | None = None) -> None:
        from confluent_kafka.admin import NewTopic
        admin = self.admin()          # kept alive until the futures resolve
        futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                                                config={"min.insync.replicas": str(self.min_isr), **(config or {})})])
        for future in futures.values():
            future.result(30)

    def partitions(self, topic: str) -> dict:
        return self.admin().list_topics(topic, timeout=10).topics[topic].partitions

    def wait_in_sync(self, topic: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                parts = self.partitions(topic)
                if parts and all(len(p.isrs) == len(p.replicas) and p.leader >= 0 for p in parts.values()):
                    return
            except Exception:           # a broker restarting: ask again
                pass
            time.sleep(0.3)
        raise AssertionError(f"{topic}: replicas not back in sync: "
                             f"{[(p.id, p.leader, p.isrs) for p in self.partitions(topic).values()]}")

    def read_all(self, topic: str) -> dict[int, list[tuple[int, bytes]]]:
        import confluent_kafka as ck
        out = {}
        for pid in self.partitions(topic):
            consumer = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "audit",
                                    "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
            tp = ck.TopicPartition(topic, pid, 0)
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            consumer.assign([tp])
            got, deadline = [], time.monotonic() + 30
            while (not got or got[-1][0] < high - 1) and time.monotonic() < deadline:
                for msg in consumer.consume(500, 1.0):
                    if not msg.error():
                        got.append((msg.offset(), msg.value()))
            consumer.close()
            out[pid] = got
        return out

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop()
        self.controller.stop()

    def kill(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.controller.kill()

    def assert_replicas_identical(self, topic: str) -> None:
        text, rows = local_comparison([str(b.data_dir) + "/logs" for b in self.brokers.values()])
        mine = [r for r in rows if r["topic"] == topic]
        assert mine and all(len(r["replicas"]) == len(self.brokers) for r in mine), text
        assert all(r["verdict"] == "consistent" for r in mine), text




def assert_readme_column(client: str, stderr: str) -> None:
    """The wire guide's compatibility column for `client` says exactly which version of each API the
    broker (its stderr: the `served:` line) answered for it."""
    used = served_versions(stderr)
    table = readme_table()
    column = next(c for c in next(iter(table.values())) if c.startswith(client))
    claimed = {api: row[column] for api, row in table.items() if row[column] != "-"}
    actual = {api: ", ".join(f"v{v}" for v in sorted(versions)) for api, versions in used.items()}
    assert claimed == actual, f"docs/guide-broker.md column {column!r} disagrees with what the client used"


def free_port_base(offsets=(0, 1, 100)) -> int:
    """A base port below Linux's ephemeral range (32768+, where the other tests' sockets live)
    with base+offset free now for every offset (`storage cluster --base-port`: brokers at base,
    base+1, ...; the controller at base+100)."""
    import random
    import socket

    def free(port):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return True
            except OSError:
                return False
    rng = random.Random()
    return next(b for b in (rng.randrange(20_000, 30_000) for _ in range(200)) if all(free(b + d) for d in offsets))
