"""What the engine tells an operator (docs/guide-operations.md "Logs"): a recovery that cut bytes
says which file, at which offset and byte position, how much, and which later segments it
deleted, at WARNING (Kafka's LogSegment.recover / LogLoader "Found invalid messages in log
segment ..."); a recovery that cut nothing says so at INFO; a partition marked uncleanable
(LogCleanerManager.markPartitionUncleanable) and a log dir going offline
(LogDirFailureChannel.maybeAddOfflineLogDir, at ERROR with the cause) each get one line."""
import errno
import logging
import os
import re

from storage import LogConfig, PartitionLog, Record, build_batch
from storage.core import errors
from storage.core.failure import LogDirFailureChannel


def messages(caplog, logger_prefix: str, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(logger_prefix) and r.levelno == level]


def test_a_recovery_that_cut_a_torn_tail_says_file_offset_and_bytes(tmp_path, small_config, caplog):
    caplog.set_level(logging.INFO, logger="storage")
    log = PartitionLog.open(tmp_path / "t-0", small_config)
    for i in range(5):
        log.append_as_leader([b"s%d" % i], 0)
    path, leo, size = log.active_segment.log_path, log.log_end_offset, log.active_segment.size
    torn = build_batch([b"torn"], base_offset=leo)
    with open(path, "ab") as f:                          # a crash: half a batch reached the file
        f.write(torn[: len(torn) // 2])
    recovered = PartitionLog.open(tmp_path / "t-0", small_config)
    (line,) = messages(caplog, "storage.log", logging.WARNING)
    assert re.fullmatch(rf"{re.escape(path)}: recovery cut {len(torn) // 2} bytes at byte position {size} "
                        rf"\(offset {leo}\): .+; the log now ends at offset {leo}", line), line
    recovered.close()


def test_a_recovery_that_deleted_later_segments_names_them(tmp_path, small_config, caplog):
    log = PartitionLog.open(tmp_path / "t-0", small_config)
    for _i in range(120):
        log.append_as_leader([b"q" * 50], 0)
    victim, later = log.segments[1], [s.log_path for s in log.segments[2:]]
    assert later
    path, base = victim.log_path, victim.base_offset
    log.close()
    with open(path, "r+b") as f:                         # a flipped bit in the first batch's records
        f.seek(70)
        byte = f.read(1)
        f.seek(70)
        f.write(bytes([byte[0] ^ 0x40]))
    caplog.set_level(logging.INFO, logger="storage")
    recovered = PartitionLog.open(tmp_path / "t-0", small_config)
    warnings = messages(caplog, "storage.log", logging.WARNING)
    assert re.fullmatch(rf"{re.escape(path)}: recovery cut \d+ bytes at byte position 0 \(offset {base}\): .*CRC.*; "
                        rf"the log now ends at offset {base}; {len(later)} later segments deleted", warnings[0])
    assert sorted(warnings[1:]) == sorted(f"{p}: deleted by recovery: it follows the invalid batch at offset {base}"
                                          for p in later)
    recovered.close()


def test_a_recovery_that_cut_nothing_says_so_at_info(tmp_path, small_config, caplog):
    log = PartitionLog.open(tmp_path / "t-0", small_config)
    log.append_as_leader([b"fine"], 0)
    log.flush()
    log.close()
    caplog.set_level(logging.INFO, logger="storage")
    PartitionLog.open(tmp_path / "t-0", small_config, recovery_point=0).close()
    assert messages(caplog, "storage.log", logging.WARNING) == []
    (line,) = messages(caplog, "storage.log", logging.INFO)
    assert line == f"{tmp_path / 't-0'}: recovery after an unclean shutdown checked 1 segment(s) from offset 0: " \
                   f"nothing was cut"


def test_a_partition_marked_uncleanable_is_one_warning_naming_the_segment(tmp_path, caplog):
    log = PartitionLog.open(tmp_path / "c-0", LogConfig(fsync=False, cleanup_policy="compact", segment_bytes=400))
    for i in range(30):
        log.append_as_leader([Record(key=b"%d" % (i % 3), value=b"%d" % i)], 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    first = log.segments[0]
    first.flush()
    data = bytearray(open(first.log_path, "rb").read())
    data[-1] ^= 0x01                                     # the last batch's last value byte: a CRC failure
    with open(first.log_path, "wb") as f:
        f.write(data)
    caplog.set_level(logging.INFO, logger="storage")
    assert log.compact(now_ms=0).uncleanable is not None
    (line,) = messages(caplog, "storage.log.cleaner", logging.WARNING)
    assert line.startswith(f"log cleaner: marked {log.path} uncleanable, skipped until segment {first.log_path} "
                           f"leaves the log: ") and "CRC" in line, line
    log.close()


def test_the_log_dir_going_offline_is_one_error_with_its_cause(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="storage")
    channel = LogDirFailureChannel(str(tmp_path))
    cause = OSError(errno.EIO, "Input/output error")
    assert isinstance(channel.fail(cause, "append"), errors.LogDirOfflineError)
    channel.fail(OSError(errno.ENOSPC, "No space left on device"), "flush")     # the first failure wins
    (record,) = [r for r in caplog.records if r.name == "storage.log"]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == f"log dir {tmp_path} is offline: append failed: [Errno 5] Input/output error; " \
                                  f"its partitions are no longer served"


def test_a_dir_superseded_by_a_newer_open_is_not_an_error(tmp_path, caplog):
    # A second open of a dir in one process (a test's or the simulator's restart) takes it over:
    # the old instance goes offline but nothing failed, so nothing is logged at ERROR.
    from storage import LogDir
    caplog.set_level(logging.INFO, logger="storage")
    first = LogDir.open(tmp_path / "d", LogConfig(fsync=False))
    second = LogDir.open(tmp_path / "d", LogConfig(fsync=False))
    assert first.offline and not second.offline
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    second.close()
    assert os.path.isdir(tmp_path / "d")
