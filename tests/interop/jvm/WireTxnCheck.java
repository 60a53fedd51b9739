// Kafka's own Java client (kafka-clients) against `python -m storage serve`, transactions: an
// exactly-once consume-transform-produce loop (a read_committed consumer in a group, a
// transactional producer that sends the transformed records and the consumer's offsets in one
// transaction per poll), an aborted transaction beside it, then a read_committed read of the
// output and the Admin client's listTransactions / describeTransactions (KIP-664).  Prints one
// line per step; exits 1 (with the reason on stderr) when anything is off.
//
//   java -cp CLASSES:JARS WireTxnCheck BOOTSTRAP INPUT OUTPUT GROUP COUNT
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class WireTxnCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], group = args[3];
        int count = Integer.parseInt(args[4]);
        Properties adminProps = new Properties();
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            admin.createTopics(List.of(new NewTopic(input, 2, (short) 1), new NewTopic(output, 2, (short) 1))).all().get();
        }
        Properties plain = new Properties();
        plain.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        plain.put(ProducerConfig.ACKS_CONFIG, "all");
        try (Producer<String, String> p = new KafkaProducer<>(plain, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < count; i++) p.send(new ProducerRecord<>(input, "k" + i, "v" + i));
            p.flush();
        }
        System.out.println("produced " + count);

        Properties cprops = new Properties();
        cprops.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cprops.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cprops.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cprops.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cprops.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        Properties tprops = new Properties();
        tprops.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        tprops.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-eos");
        int copied = 0, transactions = 0;
        try (Consumer<String, String> consumer = new KafkaConsumer<>(cprops, new StringDeserializer(), new StringDeserializer());
             Producer<String, String> producer = new KafkaProducer<>(tprops, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            producer.beginTransaction();                         // one aborted transaction first
            producer.send(new ProducerRecord<>(output, "junk", "aborted"));
            producer.flush();
            producer.abortTransaction();
            consumer.subscribe(List.of(input));
            long deadline = System.currentTimeMillis() + 60_000;
            while (copied < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) continue;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    producer.send(new ProducerRecord<>(output, r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    copied++;
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
                transactions++;
            }
        }
        System.out.println("copied " + copied);

        Properties rprops = new Properties();
        rprops.putAll(cprops);
        rprops.put(ConsumerConfig.GROUP_ID_CONFIG, group + "-reader");
        Set<String> read = new TreeSet<>();
        int readCount = 0;
        try (Consumer<String, String> reader = new KafkaConsumer<>(rprops, new StringDeserializer(), new StringDeserializer())) {
            reader.subscribe(List.of(output));
            long deadline = System.currentTimeMillis() + 30_000;
            while (readCount < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : reader.poll(Duration.ofMillis(500))) {
                    read.add(r.value());
                    readCount++;
                }
            }
            for (ConsumerRecord<String, String> r : reader.poll(Duration.ofMillis(1500))) readCount++;
        }
        Set<String> expected = new TreeSet<>();
        for (int i = 0; i < count; i++) expected.add("V" + i);
        if (readCount != count || !read.equals(expected)) {
            System.err.println("read " + readCount + " records: " + read);
            System.exit(1);
        }
        System.out.println("read " + readCount);

        try (Admin admin = Admin.create(adminProps)) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            long total = 0;
            for (OffsetAndMetadata o : committed.values()) total += o.offset();
            System.out.println("committed " + total);
            Collection<TransactionListing> listed = admin.listTransactions().all().get();
            for (TransactionListing t : listed) System.out.println("listed " + t.transactionalId() + " " + t.state());
            TransactionDescription d = admin.describeTransactions(List.of("java-eos")).all().get().get("java-eos");
            System.out.println("described " + d.state() + " " + d.topicPartitions().size());
        }
        System.out.println("ok " + copied + " " + (transactions > 0));
    }
}
