"""Kafka's kafka-dump-log (DumpLogSegments) output for .log, .index, .timeindex, .snapshot and
leader-epoch-checkpoint files."""
from __future__ import annotations

import json
import os
import struct
import sys
import zlib
from array import array
from bisect import bisect_left

from ..core import checkpoint, errors
from ..core.files import INT32_MAX, TXN_INDEX_SUFFIX
from ..core.records import decompress
from ..log.epoch import CHECKPOINT_FILE
from ..topics.coordinator_records import RecordFormatError, decode_offsets_record, decode_transaction_record
from .discovery import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogFile,
)
from .lineage import _entries
from .progress import _progress
from .scan import (
    _OFFSET_ENTRY,
    _TIME_ENTRY,
    BatchRow,
    SegmentScan,
    _read_index,
)

_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                  5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


def _increment_sequence(sequence: int, increment: int) -> int:
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def _batch_fields(batch, position: int) -> dict:
    v2 = batch.magic >= 2
    last_sequence = -1 if batch.base_sequence < 0 else _increment_sequence(batch.base_sequence,
                                                                            batch.last_offset_delta)
    horizon = batch.base_timestamp if v2 and batch.attributes & 0x40 else None
    return {"base_offset": batch.base_offset, "last_offset": batch.last_offset,
            "count": batch.record_count if v2 else None, "base_sequence": batch.base_sequence,
            "last_sequence": last_sequence, "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
            "partition_leader_epoch": batch.partition_leader_epoch, "is_transactional": batch.is_transactional,
            "is_control": batch.is_control, "delete_horizon_ms": horizon, "position": position,
            "timestamp_type": batch.timestamp_type, "max_timestamp": batch.max_timestamp,
            "size": batch.size_bytes, "magic": batch.magic, "compression": batch.compression,
            "crc": batch.crc, "is_valid": batch.is_valid()}


def _batch_line(f: dict) -> str:
    if f["magic"] >= 2:
        horizon = "OptionalLong.empty" if f["delete_horizon_ms"] is None else f"OptionalLong[{f['delete_horizon_ms']}]"
        head = (f"baseOffset: {f['base_offset']} lastOffset: {f['last_offset']} count: {f['count']} "
                f"baseSequence: {f['base_sequence']} lastSequence: {f['last_sequence']} "
                f"producerId: {f['producer_id']} producerEpoch: {f['producer_epoch']} "
                f"partitionLeaderEpoch: {f['partition_leader_epoch']} "
                f"isTransactional: {str(f['is_transactional']).lower()} isControl: {str(f['is_control']).lower()} "
                f"deleteHorizonMs: {horizon}")
    else:
        head = f"offset: {f['last_offset']}"
    return (f"{head} position: {f['position']} {f['timestamp_type']}: {f['max_timestamp']} size: {f['size']} "
            f"magic: {f['magic']} compresscodec: {f['compression']} crc: {f['crc']} "
            f"isvalid: {str(f['is_valid']).lower()}")


def _legacy_record_crcs(batch) -> list[tuple[int, bool]]:
    """(stored crc, valid) of each legacy message: the message itself, or a wrapper's inner ones."""
    view = batch.view

    def own(data) -> tuple[int, bool]:
        (size,) = struct.unpack_from(">i", data, 8)
        (crc,) = struct.unpack_from(">I", data, 12)
        return crc, zlib.crc32(bytes(data[16:12 + size])) & 0xFFFFFFFF == crc

    if not batch.attributes & 7:
        return [own(view)]
    pos = 18 + (8 if batch.magic == 1 else 0)
    (key_length,) = struct.unpack_from(">i", view, pos)
    pos += 4 + max(key_length, 0)
    (value_length,) = struct.unpack_from(">i", view, pos)
    data = decompress(batch.attributes & 7, bytes(view[pos + 4:pos + 4 + value_length]), magic=batch.magic)
    out, pos = [], 0
    while pos + 12 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        if size < 14 or pos + 12 + size > len(data):
            break
        out.append(own(memoryview(data)[pos:pos + 12 + size]))
        pos += 12 + size
    return out


def _control_text(record) -> tuple[str, dict]:
    key = record.key or b""
    if len(key) < 4:
        return " controlType: UNKNOWN(-1)", {"control_type": "UNKNOWN"}
    type_id = struct.unpack_from(">h", key, 2)[0]
    name = _CONTROL_TYPES.get(type_id, "UNKNOWN")
    if type_id in (0, 1) and record.value is not None and len(record.value) >= 6:
        coordinator_epoch = struct.unpack_from(">i", record.value, 2)[0]
        return (f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}",
                {"control_type": name, "coordinator_epoch": coordinator_epoch})
    return f" controlType: {name}({type_id})", {"control_type": name}


def _string_parser(record) -> tuple[str | None, str | None]:
    """Kafka's default decoders: key and value as UTF-8 text, each only when not null."""
    key = None if record.key is None else record.key.decode("utf-8", "replace")
    value = None if record.value is None else record.value.decode("utf-8", "replace")
    return key, value


def _parser(args):
    """kafka-dump-log's message parser for these options."""
    if getattr(args, "offsets_decoder", False):
        return lambda record: decode_offsets_record(record.key, record.value, record.offset)
    if getattr(args, "transaction_log_decoder", False):
        return lambda record: decode_transaction_record(record.key, record.value)
    return _string_parser


def _structured(text: str):
    """For --json: a decoder's JSON text as an object, any other text as it is."""
    if text.startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _record_lines(batch, args, out_json: list | None, emit, parse=_string_parser, fail=None) -> list[int]:
    """Kafka's deep-iteration lines of one batch; returns the record offsets.  `parse` gives a
    record's key and payload text; `fail` takes the message of a record it cannot read."""
    records = batch.records()
    legacy_crcs = _legacy_record_crcs(batch) if batch.magic < 2 else None
    offsets = []
    for i, record in enumerate(records):
        offsets.append(record.offset)
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        item = {"offset": record.offset, "timestamp": record.timestamp, "key_size": key_size,
                "value_size": value_size}
        # Kafka's layout exactly: "| offset: ..." then " key: ..." and " payload: ..."; with
        # --skip-record-metadata the key takes the "| " prefix (and a line without one starts
        # with " payload").
        text, prefix = "", "| "
        if not args.skip_record_metadata:
            text += (f"{prefix}offset: {record.offset} {batch.timestamp_type}: {record.timestamp} "
                     f"keySize: {key_size} valueSize: {value_size}")
            prefix = " "
            if batch.magic >= 2:
                sequence = -1 if batch.base_sequence < 0 else _increment_sequence(
                    batch.base_sequence, record.offset - batch.base_offset)
                keys = [k for k, _v in record.headers]
                text += f" sequence: {sequence} headerKeys: [{','.join(keys)}]"
                item.update(sequence=sequence, header_keys=keys)
            else:
                crc, valid = legacy_crcs[i] if legacy_crcs and i < len(legacy_crcs) else (batch.crc, True)
                text += f" crc: {crc} isvalid: {str(valid).lower()}"
                item.update(crc=crc, is_valid=valid)
            if batch.is_control:
                control, fields = _control_text(record)
                text += control
                item.update(fields)
        if args.print_data_log and not batch.is_control:
            try:
                key, payload = parse(record)
            except RecordFormatError as exc:
                if fail is None:
                    raise
                fail(f"offset {record.offset}: {exc}")
                key = payload = None
            if key is not None:
                text += f"{prefix}key: {key}"
                prefix = " "
                item["key"] = _structured(key)
            if payload is not None:
                text += f" payload: {payload}"
                item["payload"] = _structured(payload)
        if out_json is not None:
            out_json.append(item)
        else:
            emit(text)
    return offsets


class _Dump:
    """One run of dump-log: streams text to stdout (or gathers JSON), collects the errors that
    Kafka's tool prints at the end on stderr."""

    def __init__(self, args):
        self.args = args
        self.json = [] if args.json else None
        self.problems = 0
        self.index_mismatches: dict[str, list] = {}
        self.time_errors: list[str] = []
        self.non_consecutive: dict[str, list] = {}

    def emit(self, line: str) -> None:
        print(line)

    def error(self, message: str, doc: dict | None) -> None:
        self.problems += 1
        if doc is not None:
            doc.setdefault("errors", []).append(message)
        else:
            sys.stdout.flush()
            print(f"error: {message}", file=sys.stderr)

    def run(self, files: list[str]) -> int:
        for name in files:
            doc = {"file": name} if self.json is not None else None
            if doc is None:
                self.emit(f"Dumping {name}")
            base = os.path.basename(name)
            try:
                if os.path.isdir(name):
                    self.error(f"{name}: is a directory (dump-log takes files; verify takes log dirs)", doc)
                elif not os.path.isfile(name):
                    self.error(f"{name}: no such file", doc)
                elif base.endswith(LOG_SUFFIX):
                    self.dump_log(name, doc)
                elif base.endswith(TIME_INDEX_SUFFIX):
                    self.dump_time_index(name, doc)
                elif base.endswith(INDEX_SUFFIX):
                    self.dump_index(name, doc)
                elif base.endswith(SNAPSHOT_SUFFIX):
                    self.dump_snapshot(name, doc)
                elif base.endswith(TXN_INDEX_SUFFIX):
                    self.dump_txn_index(name, doc)
                elif base.startswith(CHECKPOINT_FILE):
                    self.dump_epochs(name, doc)
                else:
                    if doc is not None:
                        doc["kind"] = "unknown"
                        doc.setdefault("errors", []).append(f"{name}: ignoring unknown file")
                    else:
                        print(f"Ignoring unknown file {name}", file=sys.stderr)
            except errors.StorageError as exc:
                self.error(str(exc), doc)
            except BrokenPipeError:
                raise
            except OSError as exc:
                self.error(f"{name}: {exc.strerror or exc}", doc)
            if doc is not None:
                self.json.append(doc)
        if self.json is not None:
            json.dump({"ok": self.problems == 0, "files": self.json}, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            sys.stdout.flush()
            for file, pairs in self.index_mismatches.items():
                print(f"Mismatches in :{file}", file=sys.stderr)
                for index_offset, log_offset in pairs:
                    print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=sys.stderr)
            for line in self.time_errors:
                print(line, file=sys.stderr)
            for file, pairs in self.non_consecutive.items():
                print(f"Non-consecutive offsets in {file}", file=sys.stderr)
                for first, second in pairs:
                    print(f"  {first} is followed by {second}", file=sys.stderr)
        return self.problems

    # ---- .log
    def dump_log(self, name: str, doc: dict | None) -> None:
        args = self.args
        stem = os.path.basename(name).split(".")[0]
        start = int(stem) if stem.isdigit() else None
        if doc is not None:
            doc.update(kind="log", log_starting_offset=start, batches=[])
        elif start is not None:
            self.emit(f"Log starting offset: {start}")
        log_file = LogFile(name)
        deep = args.deep_iteration or args.print_data_log
        parse = _parser(args)
        valid_bytes, last_offset, structural = 0, -1, False
        gaps = []
        bar = _progress(log_file.size, os.path.basename(name), not args.no_progress and
                        (doc is not None or not sys.stdout.isatty()))
        try:
            for batch in log_file.batches():
                fields = _batch_fields(batch, valid_bytes)
                if not fields["is_valid"]:
                    self.problems += 1
                if doc is not None:
                    doc["batches"].append(fields)
                else:
                    self.emit(_batch_line(fields))
                if deep:
                    try:
                        records = [] if doc is not None else None
                        for offset in _record_lines(batch, args, records, self.emit, parse,
                                                    lambda message: self.error(f"{name}: {message}", doc)):
                            if last_offset != -1 and offset != last_offset + 1:
                                gaps.append((last_offset, offset))
                            last_offset = offset
                        if doc is not None:
                            fields["records"] = records
                    except errors.StorageError as exc:
                        self.error(str(exc), doc)
                valid_bytes += batch.size_bytes
                bar.update(batch.size_bytes)
        except errors.StorageError as exc:
            structural = True
            self.error(str(exc), doc)
        finally:
            bar.close()
        trailing = log_file.size - valid_bytes
        if doc is not None:
            doc["trailing_bytes"] = trailing
            doc["non_consecutive_offsets"] = [list(g) for g in gaps]
        if gaps:
            self.non_consecutive[name] = gaps
        if trailing > 0 and not structural:
            message = f"Found {trailing} invalid bytes at the end of {os.path.basename(name)}"
            self.problems += 1
            if doc is None:
                self.emit(message)

    def _sanity_result(self, name: str, problem: str | None, doc) -> None:
        if problem:
            self.error(problem, doc)
        elif doc is not None:
            doc["sanity_check"] = "passed"
        else:
            self.emit(f"{name} passed sanity check.")

    def _log_batches(self, index_path: str, suffix: str, base: int, entries, time_index: bool):
        """The batches of the index's .log that its entries name: (SegmentScan or None, .log path).
        Only their rows and an array of every batch's last offset are kept."""
        log_path = index_path[: -len(suffix)] + LOG_SUFFIX
        if not os.path.exists(log_path):
            return None, log_path
        seg = SegmentScan(base, log_path)
        seg.lasts = array("q")
        if time_index:
            positions, lasts = (), {base + relative for _t, relative in entries}
        else:
            positions = {position for _relative, position in entries}
            lasts = {base + relative for relative, _position in entries}
        try:
            for i, b in enumerate(LogFile(log_path).batches()):
                seg.lasts.append(b.last_offset)
                if b.position in positions or b.last_offset in lasts:
                    row = BatchRow(b.position, b.base_offset, b.last_offset, -1, b.magic, b.crc, True, b.size_bytes,
                                   b.max_timestamp)
                    if b.position in positions:
                        seg.at_position[b.position] = (i, row)
                    if b.last_offset in lasts:
                        seg.ending_at[b.last_offset] = (i, row)
        except errors.StorageError:
            pass    # entries past a corrupt batch are reported as not found
        return seg, log_path

    def _index_base(self, name: str, suffix: str) -> int:
        stem = os.path.basename(name)[: -len(suffix)]
        if not stem.isdigit():
            raise errors.StorageError("an index file is named by its segment's 20-digit base offset", file=name)
        return int(stem)

    # ---- .index
    def dump_index(self, name: str, doc: dict | None) -> None:
        args = self.args
        base = self._index_base(name, INDEX_SUFFIX)
        entries, _unused, data = _read_index(name, _OFFSET_ENTRY)
        if doc is not None:
            doc.update(kind="index", base_offset=base, entries=[], mismatches=[])
        slots = len(data) // _OFFSET_ENTRY.size
        if slots == 0 and not len(data) % _OFFSET_ENTRY.size:
            if doc is not None:
                doc["empty"] = True
            else:
                self.emit(f"{name} is empty.")
            return
        if args.index_sanity_check:
            problem = None
            if len(data) % _OFFSET_ENTRY.size:
                problem = (f"Index file {name} is corrupt, found {len(data)} bytes which is neither positive nor "
                           f"a multiple of 8")
            else:
                last = base + _OFFSET_ENTRY.unpack_from(data, (slots - 1) * 8)[0]
                if last < base:
                    problem = (f"Corrupt index found, index file ({name}) has non-zero size but the last offset "
                               f"is {last} which is less than the base offset {base}")
            self._sanity_result(name, problem, doc)
            return
        seg, log_path = self._log_batches(name, INDEX_SUFFIX, base, entries, False)
        if seg is None:
            self.error(f"{log_path}: no such file (the index cannot be checked against it)", doc)
        mismatches = []
        for relative, position in entries:
            offset = base + relative
            if seg is not None:
                # Kafka's tool wants the batch at the position to end at the entry's offset; an
                # appended chunk of several batches (a follower's fetch) is indexed by its last
                # offset, so a batch at or after the position ending there is accepted too.
                at = seg.at_position.get(position)
                ending = seg.ending_at.get(offset)
                if at is None or ending is None or ending[0] < at[0]:
                    mismatches.append((offset, at[1].last_offset if at is not None else -1))
            if doc is not None:
                doc["entries"].append({"offset": offset, "position": position})
            elif not args.verify_index_only:
                self.emit(f"offset: {offset} position: {position}")
        if mismatches:
            self.problems += 1
            if doc is not None:
                doc["mismatches"] = [{"index_offset": a, "log_offset": b} for a, b in mismatches]
            else:
                self.index_mismatches[os.path.abspath(name)] = mismatches

    # ---- .timeindex
    def dump_time_index(self, name: str, doc: dict | None) -> None:
        args = self.args
        base = self._index_base(name, TIME_INDEX_SUFFIX)
        entries, _unused, data = _read_index(name, _TIME_ENTRY)
        if doc is not None:
            doc.update(kind="timeindex", base_offset=base, entries=[], mismatches=[])
        if args.index_sanity_check:
            slots = len(data) // _TIME_ENTRY.size
            problem = None
            if slots:
                last_ts, last_rel = _TIME_ENTRY.unpack_from(data, (slots - 1) * 12)
                first_ts = _TIME_ENTRY.unpack_from(data, 0)[0]
                if last_ts < first_ts:
                    problem = (f"Corrupt time index found, time index file ({name}) has non-zero size but the last "
                               f"timestamp is {last_ts} which is less than the first timestamp {first_ts}")
                elif base + last_rel < base:
                    problem = (f"Corrupt time index found, time index file ({name}) has non-zero size but the last "
                               f"offset is {base + last_rel} which is less than the first offset {base}")
            if not problem and len(data) % _TIME_ENTRY.size:
                problem = (f"Time index file {name} is corrupt, found {len(data)} bytes which is neither positive "
                           f"nor a multiple of 12")
            self._sanity_result(name, problem, doc)
            return
        seg, log_path = self._log_batches(name, TIME_INDEX_SUFFIX, base, entries, True)
        if seg is None:
            self.error(f"{log_path}: no such file (the time index cannot be checked against it)", doc)
        previous = -1
        mismatch, out_of_order, not_found = [], [], []
        for timestamp, relative in entries:
            offset = base + relative
            if seg is not None:
                ending = seg.ending_at.get(offset)
                batch = ending[1] if ending is not None else None
                if batch is None:
                    later = bisect_left(seg.lasts, offset)
                    not_found.append((offset, seg.lasts[later] if later < len(seg.lasts) else -1))
                else:
                    if batch.max_timestamp != timestamp:
                        mismatch.append((timestamp, batch.max_timestamp))
                    if previous >= timestamp:
                        out_of_order.append((timestamp, previous))
            if doc is not None:
                doc["entries"].append({"timestamp": timestamp, "offset": offset})
            elif not args.verify_index_only:
                self.emit(f"timestamp: {timestamp} offset: {offset}")
            previous = timestamp
        if mismatch or out_of_order or not_found:
            self.problems += 1
        if doc is not None:
            doc["mismatches"] = [{"index_timestamp": a, "log_timestamp": b} for a, b in mismatch]
            doc["out_of_order"] = [{"index_timestamp": a, "previous_timestamp": b} for a, b in out_of_order]
            doc["offsets_not_found"] = [{"indexed_offset": a, "log_offset": b} for a, b in not_found]
            return
        path = os.path.abspath(name)
        if mismatch:
            self.time_errors.append(f"Found timestamp mismatch in :{path}")
            self.time_errors += [f"  Index timestamp: {a}, log timestamp: {b}" for a, b in mismatch]
        if out_of_order:
            self.time_errors.append(f"Found out of order timestamp in :{path}")
            self.time_errors += [f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in out_of_order]
        if not_found:
            self.time_errors.append("The following indexed offsets are not found in the log.")
            self.time_errors += [f"Indexed offset: {a}, found log offset: {b}" for a, b in not_found]

    # ---- leader-epoch-checkpoint (not in Kafka's tool)
    def dump_epochs(self, name: str, doc: dict | None) -> None:
        entries = [(int(e), int(o)) for e, o in checkpoint.read(name, 2)]
        if doc is not None:
            doc.update(kind="leader-epoch-checkpoint", version=checkpoint.VERSION, entries=_entries(entries))
            return
        self.emit(f"version: {checkpoint.VERSION} entries: {len(entries)}")
        for epoch, offset in entries:
            self.emit(f"epoch: {epoch} startOffset: {offset}")

    # ---- transaction index (Kafka's TransactionIndex: 34-byte aborted-transaction entries)
    def dump_txn_index(self, name: str, doc: dict | None) -> None:
        from ..log.txnindex import ENTRY, ENTRY_BYTES

        with open(name, "rb") as f:
            data = f.read()
        entries = [ENTRY.unpack_from(data, i) for i in range(0, len(data) - len(data) % ENTRY_BYTES, ENTRY_BYTES)]
        if len(data) % ENTRY_BYTES:
            self.error(f"{errors.location(name, len(data) - len(data) % ENTRY_BYTES)}: "
                       f"{len(data) % ENTRY_BYTES} bytes after the last whole 34-byte entry", doc)
        if doc is not None:
            doc.update(kind="txnindex", entries=[{"version": v, "producer_id": p, "first_offset": f, "last_offset": la,
                                                  "last_stable_offset": ls} for v, p, f, la, ls in entries])
            return
        for version, pid, first, last, lso in entries:
            self.emit(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                      f"lastStableOffset: {lso}")

    # ---- producer-state snapshot (Kafka's ProducerStateManager format, version 1)
    def dump_snapshot(self, name: str, doc: dict | None) -> None:
        from ..log.producer import SNAPSHOT_VERSION, decode_snapshot

        with open(name, "rb") as f:
            entries = decode_snapshot(f.read(), file=name)      # the engine's one reader
        version = SNAPSHOT_VERSION
        producers = [{"producer_id": e.producer_id, "producer_epoch": e.producer_epoch,
                      "coordinator_epoch": e.coordinator_epoch,
                      "current_txn_first_offset": -1 if e.current_txn_first_offset is None
                      else e.current_txn_first_offset,
                      "last_timestamp": e.last_timestamp, "first_sequence": e.first_sequence,
                      "last_sequence": e.last_sequence, "last_offset": e.last_offset,
                      "offset_delta": e.last_offset_delta, "timestamp": e.last_timestamp} for e in entries]
        if doc is not None:
            doc.update(kind="snapshot", version=version, producers=producers)
            return
        for p in producers:
            self.emit(f"producerId: {p['producer_id']} producerEpoch: {p['producer_epoch']} coordinatorEpoch: "
                      f"{p['coordinator_epoch']} currentTxnFirstOffset: {p['current_txn_first_offset']} lastTimestamp: "
                      f"{p['last_timestamp']} firstSequence: {p['first_sequence']} lastSequence: {p['last_sequence']} "
                      f"lastOffset: {p['last_offset']} offsetDelta: {p['offset_delta']} timestamp: {p['timestamp']}")

