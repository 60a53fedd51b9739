"""storage/cli/properties.py reads a properties file as java.util.Properties.load does (the cases
of its documentation, in our words), and storage/cli/server_properties.py maps Kafka's broker
property names onto the serve / controller flags: ranges of the flags, Kafka's precedence of
log.retention.ms over .minutes over .hours, a flag winning over the file, unknown names and
values refused with the file and the line.  No broker is started here
(tests/wire/test_server_properties.py starts them)."""
from __future__ import annotations

import pytest

from storage.cli import build_parser, main
from storage.cli.properties import PropertiesError, load, parse
from storage.cli.server_properties import BOOLEANS, FLAGS, IGNORED, SUBPARSERS, apply_config
from storage.inspect import UsageError


def pairs(text: str) -> dict[str, str]:
    return {e.key: e.value for e in parse(text)}


def test_separators_and_blanks_as_the_javadoc_examples():
    # Properties.load's javadoc: the three lines each give key "Truth", value "Beauty".
    for line in ("Truth = Beauty", "  Truth:Beauty", "Truth                    :Beauty", "Truth\tBeauty"):
        assert pairs(line) == {"Truth": "Beauty"}, line
    # A key alone has the empty value; only the first separator separates.
    assert pairs("cheeses\n") == {"cheeses": ""}
    assert pairs("a=b=c\nd: :e\nf :=g") == {"a": "b=c", "d": ":e", "f": "=g"}
    # Trailing blanks of a value are kept, leading ones dropped.
    assert pairs("k =  v  ") == {"k": "v  "}


def test_continuation_lines_join_without_their_leading_blanks():
    text = ("fruits                           apple, banana, pear, \\\n"
            "                                  cantaloupe, watermelon, \\\n"
            "                                  kiwi, mango\n")
    assert pairs(text) == {"fruits": "apple, banana, pear, cantaloupe, watermelon, kiwi, mango"}
    # An even number of backslashes is an escaped backslash, not a continuation.
    assert pairs("a=b\\\\\nc=d") == {"a": "b\\", "c": "d"}
    # A continued line that starts with # is part of the value, not a comment.
    assert pairs("a=1\\\n  #2") == {"a": "1#2"}
    # A backslash ending the file continues nothing.
    assert pairs("a=1\\") == {"a": "1"}


def test_comments_and_line_terminators():
    text = "# comment \\\nx=1\r\n  ! bang\ry=2\r\n\n   \t\nz=3"
    entries = parse(text)
    # A comment's trailing backslash does not continue it: x is an entry of its own.
    assert [(e.key, e.value, e.line) for e in entries] == [("x", "1", 2), ("y", "2", 4), ("z", "3", 7)]


def test_escapes_in_keys_and_values():
    assert pairs("\\:\\= = \\t\\n\\r\\f") == {":=": "\t\n\r\f"}
    assert pairs("key\\ with\\ blanks = v") == {"key with blanks": "v"}
    assert pairs("u=\\u0041\\u00e9\\q") == {"u": "A\u00e9q"}         # \\c is c
    with pytest.raises(PropertiesError, match="line 2"):
        parse("ok=1\nbad=\\u12G4")


def test_a_key_given_twice_keeps_the_last_and_its_line(tmp_path):
    f = tmp_path / "s.properties"
    f.write_bytes(b"a=1\nb=\xe9\na=3\n")        # ISO-8859-1, as Properties.load(InputStream)
    entries = load(str(f))
    assert (entries["a"].value, entries["a"].line) == ("3", 3)
    assert entries["b"].value == "\u00e9"


def configured(tmp_path, text: str, *flags: str, command: str = "serve"):
    f = tmp_path / "server.properties"
    f.write_text(text)
    argv = [command, "--config", str(f), *flags]
    parser = build_parser()
    return apply_config(parser, argv, parser.parse_args(argv))


def test_kafka_names_map_onto_the_flags(tmp_path):
    args = configured(tmp_path, "broker.id=4\nlisteners=PLAINTEXT://127.0.0.1:19092\nlog.dirs=/x/y\n"
                                "num.partitions=6\ndefault.replication.factor=3\nmin.insync.replicas=2\n"
                                "auto.create.topics.enable=FALSE\ncompression.type=zstd\n"
                                "log.retention.hours=2\nlog.roll.hours=1\nmessage.max.bytes=2000\n"
                                "controller.quorum.bootstrap.servers=127.0.0.1:19093\nnum.io.threads=8\n")
    assert (args.node_id, args.listen, args.data_dir, args.num_partitions) == (4, "127.0.0.1:19092", "/x/y", 6)
    assert (args.replication_factor, args.min_insync_replicas, args.no_auto_create_topics) == (3, 2, True)
    assert (args.compression_type, args.log_retention_ms, args.log_roll_ms) == ("zstd", 7_200_000, 3_600_000)
    assert (args.message_max_bytes, args.controller, args.config_ignored) == (2000, "127.0.0.1:19093",
                                                                              ["num.io.threads"])


def test_the_flush_intervals_are_the_topics_defaults(tmp_path):
    # Kafka's log.flush.interval.messages / .ms: flush.messages / flush.ms of topics that set none.
    args = configured(tmp_path, "log.flush.interval.messages=1000\nlog.flush.interval.ms=60000\n"
                                "log.flush.scheduler.interval.ms=2000\n")
    assert (args.log_flush_interval_messages, args.log_flush_interval_ms) == (1000, 60000)
    assert args.config_ignored == ["log.flush.scheduler.interval.ms"]
    assert configured(tmp_path, "").log_flush_interval_messages == 2**63 - 1


def test_the_message_timestamp_type_is_the_topics_default(tmp_path):
    # Kafka's log.message.timestamp.type: message.timestamp.type of topics that set none.
    assert configured(tmp_path, "log.message.timestamp.type=LogAppendTime\n").log_message_timestamp_type == \
        "LogAppendTime"
    assert configured(tmp_path, "").log_message_timestamp_type == "CreateTime"


def test_retention_ms_over_minutes_over_hours(tmp_path):
    # Kafka's LogConfig: log.retention.ms if given, else .minutes, else .hours.
    assert configured(tmp_path, "log.retention.hours=1\nlog.retention.minutes=3\n").log_retention_ms == 180_000
    assert configured(tmp_path, "log.retention.hours=1\nlog.retention.ms=5\n").log_retention_ms == 5
    assert configured(tmp_path, "log.retention.hours=-1\n").log_retention_ms == -1
    assert configured(tmp_path, "log.roll.hours=1\nlog.roll.ms=7\n").log_roll_ms == 7


def test_a_flag_overrides_the_file_even_at_its_default(tmp_path):
    args = configured(tmp_path, "num.partitions=6\nnode.id=5\n", "--num-partitions", "1")
    assert (args.num_partitions, args.node_id) == (1, 5)


def test_several_listeners_and_tls_map_onto_their_flags(tmp_path):
    # Several listeners (or one not PLAINTEXT, or told on another port) are --listeners with the
    # protocol map and the advertised listeners; the ssl.* PEM settings are the --ssl-* flags.
    args = configured(tmp_path, "listeners=INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9094\n"
                                "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL\n"
                                "advertised.listeners=INTERNAL://127.0.0.1:9092,EXTERNAL://kafka.example:19094\n"
                                "inter.broker.listener.name=INTERNAL\nssl.keystore.type=PEM\n"
                                "ssl.keystore.location=/k.pem\nssl.key.password=pw\nssl.truststore.type=pem\n"
                                "ssl.truststore.location=/ca.pem\nssl.client.auth=required\n"
                                "allow.plaintext.listeners=true\n")
    assert (args.listen, args.listeners) == (None, "INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9094")
    assert args.listener_security_protocol_map == "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL"
    assert args.advertised_listeners == "INTERNAL://127.0.0.1:9092,EXTERNAL://kafka.example:19094"
    assert (args.inter_broker_listener_name, args.allow_plaintext) == ("INTERNAL", True)
    assert (args.ssl_keystore, args.ssl_key_password, args.ssl_truststore, args.ssl_client_auth) == \
        ("/k.pem", "pw", "/ca.pem", "required")
    # A flag given replaces the file's listeners, whichever form either takes.
    assert configured(tmp_path, "listeners=SSL://127.0.0.1:9093\n", "--listen", "127.0.0.1:1").listeners is None
    one = configured(tmp_path, "listeners=SSL://127.0.0.1:9093\n")
    assert (one.listen, one.listeners, one.listener_security_protocol_map) == \
        (None, "SSL://127.0.0.1:9093", "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL")
    # A broker reaches its controller with the protocol the map gives the controller's listener.
    broker = configured(tmp_path, "process.roles=broker\ncontroller.quorum.bootstrap.servers=127.0.0.1:9093\n"
                                  "controller.listener.names=CONTROLLER\n"
                                  "listener.security.protocol.map=CONTROLLER:SSL,SSL:SSL\nlisteners=SSL://127.0.0.1:0\n")
    assert (broker.controller_security_protocol, broker.listeners) == ("SSL", "SSL://127.0.0.1:0")


def test_combined_roles_drop_the_controller_listener(tmp_path):
    # Kafka's own config/server.properties shape: one process, broker and controller.
    args = configured(tmp_path, "process.roles=broker,controller\nnode.id=1\n"
                                "controller.quorum.voters=1@localhost:9093\n"
                                "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\n"
                                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n")
    assert (args.listen, args.controller) == ("0.0.0.0:9092", None)


# The property names and values of Kafka's config/kraft/{server,broker,controller}.properties (the
# sample KRaft configs of a combined node, a broker and a controller): they load unchanged.
_KAFKA_COMMON = ("inter.broker.listener.name=PLAINTEXT\n"
                 "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
                 "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n"
                 "num.network.threads=3\nnum.io.threads=8\nsocket.send.buffer.bytes=102400\n"
                 "socket.receive.buffer.bytes=102400\nsocket.request.max.bytes=104857600\nnum.partitions=1\n"
                 "num.recovery.threads.per.data.dir=1\noffsets.topic.replication.factor=1\n"
                 "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n"
                 "share.coordinator.state.topic.replication.factor=1\nshare.coordinator.state.topic.min.isr=1\n"
                 "log.retention.hours=168\nlog.segment.bytes=1073741824\nlog.retention.check.interval.ms=300000\n")


def test_kafka_sample_kraft_configs_load(tmp_path):
    combined = configured(tmp_path, "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@localhost:9093\n"
                                    "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
                                    "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n"
                                    "controller.listener.names=CONTROLLER\nlog.dirs=/tmp/kraft-combined-logs\n"
                                    + _KAFKA_COMMON)
    assert (combined.listen, combined.advertised_host, combined.controller) == ("0.0.0.0:9092", "localhost", None)
    assert (combined.log_retention_ms, combined.data_dir) == (168 * 3_600_000, "/tmp/kraft-combined-logs")
    broker = configured(tmp_path, "process.roles=broker\nnode.id=2\ncontroller.quorum.bootstrap.servers=localhost:9093\n"
                                  "listeners=PLAINTEXT://localhost:9092\nadvertised.listeners=PLAINTEXT://localhost:9092\n"
                                  "controller.listener.names=CONTROLLER\nlog.dirs=/tmp/kraft-broker-logs\n" + _KAFKA_COMMON)
    assert (broker.node_id, broker.listen, broker.controller) == (2, "localhost:9092", "localhost:9093")
    controller = configured(tmp_path, "process.roles=controller\nnode.id=1\n"
                                      "controller.quorum.bootstrap.servers=localhost:9093\nlisteners=CONTROLLER://:9093\n"
                                      "advertised.listeners=CONTROLLER://localhost:9093\ncontroller.listener.names=CONTROLLER\n"
                                      "log.dirs=/tmp/kraft-controller-logs\n" + _KAFKA_COMMON.replace(
                                          "inter.broker.listener.name=PLAINTEXT\n", ""), command="controller")
    assert (controller.node_id, controller.listen, controller.data_dir) == (1, "0.0.0.0:9093", "/tmp/kraft-controller-logs")
    # The broker's properties in a controller's file are ignored there, and said so.
    assert {"num.partitions", "log.retention.hours", "num.io.threads"} <= set(controller.config_ignored)


def test_the_controller_reads_its_own_names(tmp_path):
    args = configured(tmp_path, "process.roles=controller\nnode.id=3001\nlisteners=CONTROLLER://127.0.0.1:9093\n"
                                "controller.listener.names=CONTROLLER\nbroker.session.timeout.ms=4000\n"
                                "unclean.leader.election.enable=true\nlog.dirs=/c\n", command="controller")
    assert (args.node_id, args.listen, args.session_timeout_ms, args.unclean_leader_election, args.data_dir) == \
        (3001, "127.0.0.1:9093", 4000, True, "/c")


@pytest.mark.parametrize("text, line, words", [
    ("num.partitions=2\n\nno.such.property=1\n", 3, "unknown property 'no.such.property'"),
    ("num.partitions=0\n", 1, "num.partitions='0': '0' is not an int32 in [1, "),
    ("#\nnode.id=-1\n", 2, "node.id='-1'"),
    ("log.retention.hours=2562047788015216\n", 1, "log.retention.hours"),       # * 3600000 > int64
    ("log.retention.minutes=1.5\n", 1, "not a whole number"),
    ("auto.create.topics.enable=yes\n", 1, "expected true or false"),
    ("compression.type=brotli\n", 1, "not one of"),
    ("listeners=OTHER://127.0.0.1:9093\n", 1, "known security protocol"),
    ("listeners=SSL://a:1,SSL://b:2\n", 1, "twice"),
    ("advertised.listeners=PLAINTEXT://b:2\n", 1, "needs listeners"),
    ("ssl.keystore.type=JKS\n", 1, "only PEM"),
    ("ssl.client.auth=sometimes\n", 1, "not one of"),
    ("allow.plaintext.listeners=yes\n", 1, "expected true or false"),
    ("log.dirs=/a,/b\n", 1, "exactly one log dir"),
    ("controller.quorum.voters=1@a:1,2@b:2\n", 1, "exactly one controller"),
    ("process.roles=broker\n", 1, "needs controller.quorum"),
    ("process.roles=controller\n", 1, "process.roles"),
    ("num.partitions=1\nconnections.max.idle.ms=0\n", 2, "connections.max.idle.ms (--connections-max-idle-ms) must"),
    ("queued.max.request.bytes=-2\n", 1, "must be -1 (unlimited) or at least 1"),
    ("zookeeper.connect=localhost:2181\n", 1, "unknown property 'zookeeper.connect'"),
    ("node.id=1\nbroker.id=2\n", 2, "differ"),
    ("broker.id=2\nnode.id=1\n", 1, "differ"),
    ("log.retention.ms=5\nlog.retention.hours=x\n", 2, "not a whole number"),
    ("log.roll.hours=+-1\n", 1, "not a whole number"),
    # KafkaConfigTest's invalid values of log.flush.interval.messages ("not_a_number", "0") and .ms.
    ("log.flush.interval.messages=not_a_number\n", 1, "is not an int64 in [1, "),
    ("log.flush.interval.messages=0\n", 1, "log.flush.interval.messages"),
    ("log.flush.interval.ms=not_a_number\n", 1, "is not an int64 in [0, "),
    ("log.message.timestamp.type=logappendtime\n", 1, "not one of"),
    ("offsets.topic.num.partitions=\\u0031\\u0030\\u0030\\u0030\\u0030\\u0030\n", 1, "offsets.topic.num.partitions"),
])
def test_a_refused_property_names_the_file_and_its_line(tmp_path, text, line, words):
    with pytest.raises(UsageError) as raised:
        configured(tmp_path, text)
    assert f"server.properties, line {line}: " in str(raised.value)
    assert words in str(raised.value)


def test_main_refuses_with_exit_2_and_starts_nothing(tmp_path, capsys):
    f = tmp_path / "server.properties"
    f.write_text(f"log.dirs={tmp_path / 'data'}\nmin.insync.replicas=0\n")
    assert main(["serve", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"usage error: {f}, line 2: min.insync.replicas='0'" in err
    assert not (tmp_path / "data").exists()
    assert main(["serve", "--config", str(tmp_path / "missing.properties")]) == 2
    assert main(["serve"]) == 2 and "--data-dir (or log.dirs" in capsys.readouterr().err


def test_the_ignored_properties_are_documented():
    guide = open("docs/guide-operations.md", encoding="utf-8").read()
    for name in IGNORED:
        assert f"`{name}`" in guide, name


def _stored(text: str, key: bool) -> str:
    """`text` escaped as Properties.store writes it: \\ and the separators, comment marks and control
    characters escaped; a value's leading blank escaped; anything outside printable ASCII as \\uXXXX."""
    out = []
    for i, c in enumerate(text):
        if c in "\\=:#!":
            out.append("\\" + c)
        elif c == " ":
            out.append("\\ " if key or i == 0 else " ")
        elif c in "\t\n\r\f":
            out.append("\\" + "tnrf"["\t\n\r\f".index(c)])
        elif not " " < c < "\x7f":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def test_what_properties_store_writes_reads_back():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    text = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=12)

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(st.tuples(text.filter(bool), text), max_size=5), st.sampled_from(["=", ": ", " ", "\t= "]))
    def check(pairs_, separator):
        body = "# stored\n" + "".join(f"{_stored(k, True)}{separator}{_stored(v, False)}\n" for k, v in pairs_)
        assert [(e.key, e.value) for e in parse(body)] == pairs_
    check()


def test_every_mapped_name_has_its_flag_and_its_doc_row():
    parser = build_parser()
    parser.parse_args(["serve", "--data-dir", "x"])
    guide = open("docs/guide-operations.md", encoding="utf-8").read()
    for command in ("serve", "controller"):
        sub = SUBPARSERS[command]
        for name, dest in FLAGS[command].items():
            assert dest in sub.actions_by_dest, (command, name)
            assert f"`{name}`" in guide, name
        for name, (dest, _) in BOOLEANS[command].items():
            assert dest in sub.actions_by_dest and f"`{name}`" in guide, (command, name)


def test_the_acl_properties_map_onto_the_acl_flags(tmp_path):
    args = configured(tmp_path, "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
                                "super.users=User:admin;User:ops\nallow.everyone.if.no.acl.found=true\n")
    assert args.authorizer == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert (args.super_users, args.allow_everyone_if_no_acl_found) == ("User:admin;User:ops", True)
    plain = configured(tmp_path, "num.partitions=2\n")
    assert (plain.authorizer, plain.allow_everyone_if_no_acl_found) == ("", False)     # ACLs off
    # a controller's file may carry them (Kafka's do): accepted, unused
    configured(tmp_path, "authorizer.class.name=x\nsuper.users=User:admin\n", command="controller")
