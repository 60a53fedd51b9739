// Kafka's own Java client (kafka-clients) against `python -m storage serve`: create a topic,
// produce keyed records (idempotent, acks=all), consume them in a group and commit, then
// produce more and resume in the same group at the committed offsets.  Prints one line per
// step; exits 1 (with the reason on stderr) when anything is off.
//
//   java -cp CLASSES:JARS WireClientCheck BOOTSTRAP TOPIC GROUP COUNT
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;

public class WireClientCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int count = Integer.parseInt(args[3]);
        Properties admin = new Properties();
        admin.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin client = Admin.create(admin)) {
            client.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            System.out.println("created " + topic + " " + client.describeTopics(List.of(topic)).allTopicNames().get()
                    .get(topic).partitions().size());
        }
        produce(bootstrap, topic, 0, count);
        List<String> first = consume(bootstrap, topic, group, count);
        produce(bootstrap, topic, count, 10);
        List<String> resumed = consume(bootstrap, topic, group, 10);
        Set<String> expectFirst = new TreeSet<>(), expectResumed = new TreeSet<>();
        for (int i = 0; i < count; i++) expectFirst.add("value-" + i);
        for (int i = count; i < count + 10; i++) expectResumed.add("value-" + i);
        if (first.size() != count || !new TreeSet<>(first).equals(expectFirst)) {
            System.err.println("first read: " + first.size() + " records, not the " + count + " produced");
            System.exit(1);
        }
        if (resumed.size() != 10 || !new TreeSet<>(resumed).equals(expectResumed)) {
            System.err.println("resumed read: " + resumed + ", not the 10 produced after the commit");
            System.exit(1);
        }
        System.out.println("ok " + first.size() + " " + resumed.size());
    }

    static void produce(String bootstrap, String topic, int start, int count) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = start; i < start + count; i++)
                sent.add(producer.send(new ProducerRecord<>(topic, "key-" + (i % 7), "value-" + i)));
            producer.flush();
            for (java.util.concurrent.Future<RecordMetadata> f : sent) f.get();
            System.out.println("produced " + count);
        }
    }

    static List<String> consume(String bootstrap, String topic, String group, int want) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 40_000;
            while (got.size() < want && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) got.add(r.value());
            consumer.commitSync();
        }
        System.out.println("consumed " + got.size());
        return got;
    }
}
