import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.ControlRecordType;
import org.apache.kafka.common.record.EndTransactionMarker;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * Reads log segment files with Apache Kafka's own record classes (kafka-clients) and prints
 * what Kafka sees, one tab-separated line per item, for tests/interop/test_interop_jvm.py:
 *
 *   VERSION  kafkaVersion  commitId
 *   FILE     path  fileRecordsSizeInBytes
 *   BATCH    baseOffset lastOffset partitionLeaderEpoch magic compression timestampType
 *            isTransactional isControlBatch producerId producerEpoch baseSequence lastSequence
 *            maxTimestamp countOrNull sizeInBytes checksum
 *   RECORD   offset timestamp sequence key value headers
 *   CONTROL  offset controlType coordinatorEpoch        (after each record of a control batch)
 *   END      path batchCount bytesCoveredByBatches
 *
 * key and value are lower-case hex or "null"; headers is a comma-separated list of
 * hex(utf8(key))=hex(value), the value "null" for a null header value, empty for no headers.
 *
 * Every batch gets batch.ensureValid() (size, CRC-32C) and every record record.ensureValid();
 * iterating a batch also makes Kafka decompress it and parse every record. A failure prints
 * "ERROR <path> <exception>" on stderr, the remaining files are still checked, and the exit
 * status is 1.
 *
 * Usage: java -cp <classes>:<kafka-clients and codec jars> KafkaRecordsCheck FILE...
 */
public final class KafkaRecordsCheck {
    private static final HexFormat HEX = HexFormat.of();

    public static void main(String[] args) {
        if (args.length == 0) {
            System.err.println("usage: KafkaRecordsCheck FILE...");
            System.exit(2);
        }
        StringBuilder out = new StringBuilder();
        line(out, "VERSION", AppInfoParser.getVersion(), AppInfoParser.getCommitId());
        boolean failed = false;
        for (String path : args) {
            try {
                check(path, out);
            } catch (Exception e) {
                failed = true;
                System.err.println("ERROR\t" + path + "\t" + e);
                for (Throwable c = e.getCause(); c != null; c = c.getCause()) {
                    System.err.println("  caused by " + c);
                }
            }
        }
        System.out.print(out);
        System.out.flush();
        System.exit(failed ? 1 : 0);
    }

    private static void check(String path, StringBuilder out) throws Exception {
        // Read-only open (mutable=false): the checker never writes to a segment.
        try (FileRecords records = FileRecords.open(new File(path), false)) {
            line(out, "FILE", path, records.sizeInBytes());
            int batches = 0;
            long covered = 0;
            for (RecordBatch batch : records.batches()) {
                batch.ensureValid();
                Integer count = batch.countOrNull();
                line(out, "BATCH", batch.baseOffset(), batch.lastOffset(), batch.partitionLeaderEpoch(),
                        batch.magic(), batch.compressionType().name, batch.timestampType(),
                        batch.isTransactional(), batch.isControlBatch(), batch.producerId(),
                        batch.producerEpoch(), batch.baseSequence(), batch.lastSequence(),
                        batch.maxTimestamp(), count == null ? "null" : count, batch.sizeInBytes(),
                        batch.checksum());
                for (Record record : batch) {
                    record.ensureValid();
                    line(out, "RECORD", record.offset(), record.timestamp(), record.sequence(),
                            hex(record.key()), hex(record.value()), headers(record.headers()));
                    if (batch.isControlBatch()) {
                        ControlRecordType type = ControlRecordType.parse(record.key());
                        String epoch = "-";
                        if (type == ControlRecordType.COMMIT || type == ControlRecordType.ABORT) {
                            epoch = String.valueOf(EndTransactionMarker.deserialize(record).coordinatorEpoch());
                        }
                        line(out, "CONTROL", record.offset(), type, epoch);
                    }
                }
                batches++;
                covered += batch.sizeInBytes();
            }
            line(out, "END", path, batches, covered);
        }
    }

    private static String hex(ByteBuffer buffer) {
        if (buffer == null) {
            return "null";
        }
        byte[] bytes = new byte[buffer.remaining()];
        buffer.duplicate().get(bytes);
        return HEX.formatHex(bytes);
    }

    private static String headers(Header[] headers) {
        StringBuilder s = new StringBuilder();
        for (Header h : headers) {
            if (s.length() > 0) {
                s.append(',');
            }
            s.append(HEX.formatHex(h.key().getBytes(StandardCharsets.UTF_8))).append('=');
            s.append(h.value() == null ? "null" : HEX.formatHex(h.value()));
        }
        return s.toString();
    }

    private static void line(StringBuilder out, Object... fields) {
        for (int i = 0; i < fields.length; i++) {
            if (i > 0) {
                out.append('\t');
            }
            out.append(fields[i]);
        }
        out.append('\n');
    }
}
