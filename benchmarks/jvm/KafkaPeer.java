// The JVM peer of benchmarks/bench_jvm.py: Apache Kafka's own record classes (kafka-clients
// 3.9.1, the jar the interop tests use) doing what the engine does, timed inside one warm JVM.
//
// A line protocol on stdin/stdout, one command a line, one answer a line ("ns <elapsed>" or
// "error <reason>"); the input files are read into memory before the clock starts:
//   append <batches-file> <out-file>   every batch of the file, one FileRecords.append per
//                                      batch, each checked first with ensureValid (the CRC
//                                      check a broker's LogValidator makes); then close
//   build <batches> <records> <value-file> <compression>
//                                      MemoryRecordsBuilder: <batches> batches of <records>
//                                      records, each value the whole value file, no key
//   read <log-file> <max-bytes>        FileRecords.slice(position, max-bytes) as a fetch reads,
//                                      every batch of each slice loaded and ensureValid'd
//   quit
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.record.CompressionType;
import org.apache.kafka.common.record.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MemoryRecordsBuilder;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.TimestampType;

public final class KafkaPeer {
    private static final Map<String, List<MemoryRecords>> BATCHES = new HashMap<>();
    private static final Map<String, byte[]> VALUES = new HashMap<>();
    private static long sink;   // keeps results alive so the JIT cannot drop the work

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        PrintStream out = new PrintStream(System.out, true);
        out.println("ready kafka-clients " + org.apache.kafka.common.utils.AppInfoParser.getVersion());
        String line;
        while ((line = in.readLine()) != null) {
            String[] a = line.trim().split(" ");
            try {
                switch (a[0]) {
                    case "append": out.println("ns " + append(a[1], a[2])); break;
                    case "build": out.println("ns " + build(Integer.parseInt(a[1]), Integer.parseInt(a[2]), a[3], a[4])); break;
                    case "read": out.println("ns " + read(a[1], Integer.parseInt(a[2]))); break;
                    case "quit": out.println("bye " + sink); return;
                    default: out.println("error unknown command " + a[0]);
                }
            } catch (Exception e) {
                out.println("error " + e.toString().replace('\n', ' '));
            }
        }
    }

    /** The file's batches, each in its own heap buffer (as a request brings them). */
    private static List<MemoryRecords> batches(String path) throws Exception {
        List<MemoryRecords> cached = BATCHES.get(path);
        if (cached != null) return cached;
        ByteBuffer all = ByteBuffer.wrap(Files.readAllBytes(Path.of(path)));
        List<MemoryRecords> list = new ArrayList<>();
        for (MutableRecordBatch batch : MemoryRecords.readableRecords(all).batches()) {
            ByteBuffer copy = ByteBuffer.allocate(batch.sizeInBytes());
            batch.writeTo(copy);
            copy.flip();
            list.add(MemoryRecords.readableRecords(copy));
        }
        BATCHES.put(path, list);
        return list;
    }

    private static long append(String batchesPath, String outPath) throws Exception {
        List<MemoryRecords> list = batches(batchesPath);
        new File(outPath).delete();
        long start = System.nanoTime();
        FileRecords file = FileRecords.open(new File(outPath));
        for (MemoryRecords records : list) {
            for (MutableRecordBatch batch : records.batches()) batch.ensureValid();
            file.append(records);
        }
        file.close();
        long elapsed = System.nanoTime() - start;
        sink += file.sizeInBytes();
        return elapsed;
    }

    private static long build(int batches, int records, String valuePath, String codec) throws Exception {
        byte[] value = VALUES.computeIfAbsent(valuePath, p -> {
            try { return Files.readAllBytes(Path.of(p)); } catch (Exception e) { throw new RuntimeException(e); }
        });
        Compression compression = Compression.of(CompressionType.forName(codec)).build();
        int capacity = records * (value.length + 32) + 128;
        long ts = System.currentTimeMillis();
        long start = System.nanoTime();
        for (int b = 0; b < batches; b++) {
            MemoryRecordsBuilder builder = MemoryRecords.builder(ByteBuffer.allocate(capacity), RecordBatch.CURRENT_MAGIC_VALUE,
                    compression, TimestampType.CREATE_TIME, (long) b * records);
            for (int r = 0; r < records; r++) builder.append(ts, null, value);
            sink += builder.build().sizeInBytes();
        }
        return System.nanoTime() - start;
    }

    private static long read(String logPath, int maxBytes) throws Exception {
        long start = System.nanoTime();
        FileRecords file = FileRecords.open(new File(logPath), false);
        int size = file.sizeInBytes(), position = 0;
        long batches = 0;
        while (position < size) {
            FileRecords slice = file.slice(position, maxBytes);
            int end = position;
            for (FileChannelRecordBatch batch : slice.batches()) {
                batch.ensureValid();
                end = batch.position() + batch.sizeInBytes();
                batches++;
            }
            if (end == position) break;           // a partial batch: a fetch would stop too
            position = end;
        }
        file.closeHandlers();
        file.channel().close();
        long elapsed = System.nanoTime() - start;
        sink += batches;
        return elapsed;
    }
}
