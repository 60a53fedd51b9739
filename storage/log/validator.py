"""Kafka's LogValidator for batches a producer sent to the leader (AppendOrigin.CLIENT).

The common case runs in C, inside the append (csrc/batch.c, check_client_batch): per batch,
at least one record, a record count equal to last_offset_delta + 1, no control batch, a
sequence number when the batch has a producer id, CreateTime, and for an uncompressed batch
a walk over its records (well formed, offset deltas 0..n-1, nothing left over) that also
checks the batch's max timestamp against the largest record timestamp.  What C cannot do
without help comes here (PLOG_ERECHECK, nothing written yet):

  - a compressed batch: its records are decompressed (bounded, codecs.DECOMPRESSED_BYTES_MAX)
    and walked the same way;
  - a max timestamp that is not the largest record timestamp: Kafka's leader sets it from
    the records (LogValidator.assignOffsetsNonCompressed, setMaxTimestamp), so it is
    rewritten here, after the batch's CRC was checked, and the CRC is recomputed.

`recompress` is LogValidator's other road: a topic whose compression.type names a codec (not
"producer") has every producer batch of another codec rebuilt in it before the append, as
Kafka's validateMessagesAndAssignOffsetsCompressed does (inPlaceAssignment false): the
records and their timestamps (CreateTime) as they came, the producer id, epoch, base sequence
and transactional flag kept, the offsets then assigned by the append as for any batch.

`stamp_log_append_time` is LogValidator on a topic whose message.timestamp.type is LogAppendTime:
the checks above, then every batch's timestamp type and max timestamp set to the append's
clock, its CRC again (the C pass, which refuses that bit from a producer, does not check such a
chunk again).  No timestamp range check applies there (Kafka's validateTimestamp is CreateTime's).

`explain` turns the C refusal of a batch into Kafka's reason, naming the record.

Where we differ from Kafka, on purpose: a chunk may hold several batches (Kafka takes one
per produce request); a compressed batch whose offset deltas are not 0..n-1 is refused
(Kafka rebuilds it, for old v0/v1 clients; a v2 producer never writes one); a LogAppendTime
batch from a producer is refused (Kafka's CreateTime topic refuses it only when it has no
timestamp and otherwise rewrites the timestamp type).  There is no timestamp range check
(message.timestamp.before/after.max.ms default to unbounded in Kafka).
"""
from __future__ import annotations

import struct

from ..core import errors
from ..core._native import ffi, lib
from ..core.codecs import CODEC_IDS, decompress
from ..core.files import INT64_MAX
from ..core.records import BATCH_OVERHEAD, Record, RecordBatch, build_batch, iter_batches

_CRC_START = 21            # the CRC covers the batch from its attributes on (attributes: int16 there)
_POS_CRC = 17
_POS_MAX_TIMESTAMP = 35
PRODUCER_LOG_APPEND_TIME = "a producer must not set the LogAppendTime timestamp type"


def _parse(pointer, length: int, pos: int):
    """The v2 batch header at pos, or None when there is none (the C pass reports why)."""
    info = ffi.new("plog_batch_info *")
    if lib.plog_batch_parse(pointer, length, pos, 0, info) or info.magic != 2:
        return None
    return info


def _header_problem(info) -> str | None:
    """LogValidator.validateBatch's checks of a producer batch's header, as check_client_batch
    makes them: the reason for the first one that fails."""
    if info.record_count <= 0:
        return f"a producer batch must hold at least one record (record count {info.record_count})"
    if info.record_count != info.last_offset_delta + 1:
        return (f"inconsistent batch: offset range of {info.last_offset_delta + 1} offsets "
                f"(last offset delta {info.last_offset_delta}) and record count {info.record_count}")
    if info.attributes & lib.PLOG_ATTR_CONTROL:
        return "producers may not write control batches (append with origin='coordinator')"
    if info.producer_id >= 0 and info.base_sequence < 0:
        return f"invalid sequence number {info.base_sequence} with producer id {info.producer_id}"
    return None


def _walk_records(section, count: int, *, file, batch_position: int, base_offset: int,
                  records_position: int | None):
    """plog_records_check over one batch's records; returns the largest timestamp delta.
    records_position: where the section starts in the chunk (None when decompressed)."""
    max_delta = ffi.new("int64_t *")
    error_position = ffi.new("int64_t *")
    with ffi.from_buffer(section) as pointer:
        rc = lib.plog_records_check(pointer, len(section), count, max_delta, error_position)
    if rc:
        where = batch_position if records_position is None else records_position + error_position[0]
        detail = "" if records_position is not None else f" (byte {error_position[0]} of the decompressed records)"
        if rc == lib.PLOG_EORDER:
            reason = f"a record's offset delta is not its index in the batch{detail}"
        elif error_position[0] >= len(section):
            reason = f"fewer records than the batch's record count {count}{detail}"
        else:
            reason = f"malformed record, or bytes left after {count} records{detail}"
        raise errors.InvalidRecordError(reason, file=file, position=where, offset=base_offset)
    return max_delta[0]


def recheck(buf: bytearray, *, file, log_append_time: int | None = None) -> None:
    """Check every batch of a producer chunk the C pass sent back, in place: CRC first, then
    the records (decompressed when compressed), then set the max timestamp from the records
    (with a new CRC) where the producer's differs.  Raises the StorageError Kafka would.
    log_append_time (a LogAppendTime topic's append, its clock's one reading): the same checks,
    a producer's own LogAppendTime bit refused, and every batch stamped (`_stamp`) instead."""
    length = len(buf)
    pos = 0
    with ffi.from_buffer(buf) as pointer:
        while pos < length:
            info = _parse(pointer, length, pos)
            if info is None:
                return          # not a whole v2 batch: the C pass refuses the chunk, naming it
            size = info.size_bytes
            if not lib.plog_batch_crc_ok(pointer + pos, info):
                raise errors.CorruptRecordError("CRC mismatch", file=file, position=pos, offset=info.base_offset)
            problem = _header_problem(info)
            if problem:
                raise errors.InvalidRecordError(problem, file=file, position=pos, offset=info.base_offset)
            if info.attributes & lib.PLOG_ATTR_LOG_APPEND_TIME:
                if log_append_time is None:
                    return      # refused by the C pass (PLOG_ETIMESTAMP)
                raise errors.InvalidTimestampError(PRODUCER_LOG_APPEND_TIME, file=file, position=pos,
                                                   offset=info.base_offset)
            codec = info.attributes & lib.PLOG_ATTR_COMPRESSION_MASK
            section = memoryview(buf)[pos + BATCH_OVERHEAD:pos + size]
            try:
                if codec:
                    data = decompress(codec, bytes(section), file=file, position=pos, offset=info.base_offset)
                    max_delta = _walk_records(data, info.record_count, file=file, batch_position=pos,
                                              base_offset=info.base_offset, records_position=None)
                else:
                    max_delta = _walk_records(section, info.record_count, file=file, batch_position=pos,
                                              base_offset=info.base_offset, records_position=pos + BATCH_OVERHEAD)
            finally:
                section.release()
            if log_append_time is not None:
                _stamp(buf, pointer, pos, info, log_append_time)
                pos += size
                continue
            newest = info.base_timestamp + max_delta
            if not -2**63 <= newest <= INT64_MAX:
                raise errors.InvalidTimestampError(
                    f"record timestamp {info.base_timestamp} + {max_delta} overflows", file=file,
                    position=pos, offset=info.base_offset)
            max_timestamp = max(newest, -1)
            if max_timestamp != info.max_timestamp:
                struct.pack_into(">q", buf, pos + _POS_MAX_TIMESTAMP, max_timestamp)
                crc = lib.plog_crc32c(0, pointer + pos + _CRC_START, size - _CRC_START)
                struct.pack_into(">I", buf, pos + _POS_CRC, crc)
            pos += size


def _stamp(buf: bytearray, pointer, pos: int, info, now: int) -> None:
    """Kafka's batch.setMaxTimestamp(LOG_APPEND_TIME, now) on the checked batch at `pos`: the
    timestamp type bit, the max timestamp, the CRC over the batch again."""
    struct.pack_into(">H", buf, pos + _CRC_START, (info.attributes | lib.PLOG_ATTR_LOG_APPEND_TIME) & 0xFFFF)
    struct.pack_into(">q", buf, pos + _POS_MAX_TIMESTAMP, now)
    struct.pack_into(">I", buf, pos + _POS_CRC, lib.plog_crc32c(0, pointer + pos + _CRC_START,
                                                                info.size_bytes - _CRC_START))


def stamp_log_append_time(buf, now: int, *, file, client: bool) -> bytearray:
    """Kafka's LogValidator on a LogAppendTime topic (assignOffsetsNonCompressed; in place
    validateMessagesAndAssignOffsetsCompressed): `buf` (copied when it is not a bytearray the
    log owns) with every v2 batch given the LogAppendTime timestamp type and max timestamp
    `now` -- one reading of the clock for the whole append -- and its CRC again.  The records and
    their timestamp deltas are left as they are: a reader takes the batch's max timestamp for
    every record.  A producer's chunk (`client`) gets recheck's checks first, C's own
    (PLOG_VALIDATE_CLIENT) being off for it, since the stamp sets the bit C refuses; the
    broker's own batches (markers) have their CRC checked before the stamp.  Either way a
    damaged batch is refused, never signed again; a batch that does not parse stops the stamp
    and the C pass refuses the chunk, naming it."""
    if buf.__class__ is not bytearray:
        buf = bytearray(buf)
    if client:
        recheck(buf, file=file, log_append_time=now)
        return buf
    length, pos = len(buf), 0
    with ffi.from_buffer(buf) as pointer:
        while pos < length:
            info = _parse(pointer, length, pos)
            if info is None:
                break
            if not lib.plog_batch_crc_ok(pointer + pos, info):
                raise errors.CorruptRecordError("CRC mismatch", file=file, position=pos, offset=info.base_offset)
            _stamp(buf, pointer, pos, info, now)
            pos += info.size_bytes
    return buf


def explain(buf, pos: int, rc: int, *, file) -> errors.StorageError:
    """The error for a producer batch at `pos` that the C pass refused with PLOG_ERECORD or
    PLOG_ETIMESTAMP: Kafka's reason, and for a record-level problem the record's position."""
    with ffi.from_buffer(buf) as pointer:
        info = _parse(pointer, len(buf), pos)
    assert info is not None, "the C pass refused a batch it could not parse as a producer batch"
    offset = info.base_offset
    if rc == lib.PLOG_ETIMESTAMP:
        if info.attributes & lib.PLOG_ATTR_LOG_APPEND_TIME:
            reason = PRODUCER_LOG_APPEND_TIME
        else:
            reason = "a record timestamp overflows (base timestamp plus delta)"
        return errors.InvalidTimestampError(reason, file=file, position=pos, offset=offset)
    reason = _header_problem(info)
    if reason is None:
        section = memoryview(buf)[pos + BATCH_OVERHEAD:pos + info.size_bytes]
        try:
            _walk_records(section, info.record_count, file=file, batch_position=pos, base_offset=offset,
                          records_position=pos + BATCH_OVERHEAD)
        except errors.InvalidRecordError as exc:
            return exc
        finally:
            section.release()
        reason = "invalid record"
    return errors.InvalidRecordError(reason, file=file, position=pos, offset=offset)


def recompress(buf, target: tuple[str, int | None], *, file):
    """`buf` with every producer batch whose codec is not target's (codec, level) rebuilt in
    it; `buf` itself when none differs.  A batch C refuses anyway (not a whole v2 batch, a
    control or LogAppendTime batch) is left for C to name; a batch whose CRC or header is bad
    is refused here, before its records are read."""
    codec, level = target
    pieces, changed, pos, length = [], False, 0, len(buf)
    with ffi.from_buffer(buf) as pointer:
        while pos < length:
            info = _parse(pointer, length, pos)
            if info is None:
                break
            size = info.size_bytes
            attributes = info.attributes
            if (attributes & lib.PLOG_ATTR_COMPRESSION_MASK) == CODEC_IDS[codec] or \
                    attributes & (lib.PLOG_ATTR_CONTROL | lib.PLOG_ATTR_LOG_APPEND_TIME):
                pieces.append(bytes(buf[pos:pos + size]))
                pos += size
                continue
            if not lib.plog_batch_crc_ok(pointer + pos, info):
                raise errors.CorruptRecordError("CRC mismatch", file=file, position=pos, offset=info.base_offset)
            problem = _header_problem(info)
            if problem:
                raise errors.InvalidRecordError(problem, file=file, position=pos, offset=info.base_offset)
            batch = RecordBatch(memoryview(bytes(buf[pos:pos + size])), source=file, position=pos)
            records = [Record(None, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
            pieces.append(build_batch(records, base_offset=info.base_offset, compression=codec, level=level,
                                      partition_leader_epoch=info.partition_leader_epoch,
                                      producer_id=info.producer_id, producer_epoch=info.producer_epoch,
                                      base_sequence=info.base_sequence,
                                      is_transactional=bool(attributes & lib.PLOG_ATTR_TRANSACTIONAL)))
            changed = True
            pos += size
    if not changed:
        return buf
    if pos < length:
        pieces.append(bytes(buf[pos:]))
    return bytearray().join(pieces)


def check_timestamps(buf, config, now: int, *, file) -> None:
    """Kafka's LogValidator.validateTimestamp for a topic with message.timestamp.before/after.max.ms
    set: every CreateTime record more than before_max_ms before `now` or after_max_ms after it
    is a KIP-467 record error of its batch (InvalidTimestampError, the first batch that has one)."""
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    try:
        batches = list(iter_batches(buf, verify=False))
    except errors.StorageError:
        return                                  # the append refuses the damage itself
    for batch in batches:
        if batch.magic != 2 or batch.attributes & lib.PLOG_ATTR_LOG_APPEND_TIME:
            continue                            # refused by the C pass
        bad = [(i, f"Timestamp {r.timestamp} of message with offset {r.offset} is out of range. The timestamp "
                   f"should be within [{now - before}, {now + after}]")
               for i, r in enumerate(batch.records())
               if r.timestamp != -1 and (now - r.timestamp > before or r.timestamp - now > after)]
        if bad:
            raise errors.record_validation(errors.InvalidTimestampError, bad, file=f"{file} (appended data)",
                                           position=batch.position, offset=batch.base_offset)
