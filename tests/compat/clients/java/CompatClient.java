// The compatibility client over Apache Kafka's Java client; the same source is compiled against
// each kafka-clients version the suite runs (2.0 up), so it uses only APIs all of them have.
// Operations, as for every client of tests/compat (one JSON line printed):
//   create BOOTSTRAP TOPIC PARTITIONS | produce BOOTSTRAP TOPIC CODEC COUNT PREFIX |
//   consume BOOTSTRAP TOPIC GROUP COUNT | committed BOOTSTRAP TOPIC GROUP | offsets BOOTSTRAP TOPIC |
//   version
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.AdminClient;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class CompatClient {
    private static final long CONSUME_TIMEOUT_MS = 40_000;

    public static void main(String[] args) {
        try {
            System.out.println(run(args));
            System.exit(0);
        } catch (Exception e) {
            e.printStackTrace();
            System.out.println("{\"error\":" + quote(e.toString()) + "}");
            System.exit(1);
        }
    }

    private static String run(String[] a) throws Exception {
        if (a.length == 1 && a[0].equals("version")) return "{\"version\":" + quote(version()) + "}";
        if (a.length < 3) throw new IllegalArgumentException("usage: OP BOOTSTRAP TOPIC ARGS...");
        Properties props = new Properties();
        props.put("bootstrap.servers", a[1]);
        props.put("client.id", "compat-java");
        String topic = a[2];
        switch (a[0] + "/" + a.length) {
            case "create/4": return create(props, topic, Integer.parseInt(a[3]));
            case "produce/6": return produce(props, topic, a[3], Integer.parseInt(a[4]), a[5]);
            case "consume/5": return consume(props, topic, a[3], Integer.parseInt(a[4]));
            case "committed/4": return committed(props, topic, a[3]);
            case "offsets/3": return offsets(props, topic);
            default: throw new IllegalArgumentException("unknown operation or wrong arguments: " + String.join(" ", a));
        }
    }

    private static String create(Properties props, String topic, int partitions) throws Exception {
        try (AdminClient admin = AdminClient.create(props)) {
            admin.createTopics(Collections.singleton(new NewTopic(topic, partitions, (short) 1))).all().get();
        }
        return "{\"created\":" + quote(topic) + "}";
    }

    private static String produce(Properties props, String topic, String codec, int count, String prefix)
            throws Exception {
        props.put("acks", "all");
        props.put("enable.idempotence", "true");
        props.put("compression.type", codec);
        props.put("linger.ms", "20");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, key(prefix, i), value(prefix, i))));
            }
            List<String> acked = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                RecordMetadata m = sent.get(i).get();
                acked.add(record(m.partition(), m.offset(), key(prefix, i), value(prefix, i)));
            }
            return "{\"acked\":[" + String.join(",", acked) + "]}";
        }
    }

    private static String consume(Properties props, String topic, String group, int count) {
        props.put("group.id", group);
        // -Dcompat.group.protocol=consumer: KIP-848's protocol (kafka-clients 3.7 and later).
        String protocol = System.getProperty("compat.group.protocol");
        if (protocol != null) props.put("group.protocol", protocol);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        List<String> records = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(Collections.singleton(topic));
            long deadline = System.currentTimeMillis() + CONSUME_TIMEOUT_MS;
            while (records.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    records.add(record(r.partition(), r.offset(), r.key(), r.value()));
                }
            }
            if (!records.isEmpty()) consumer.commitSync();
        }
        return "{\"records\":[" + String.join(",", records) + "]}";
    }

    private static String committed(Properties props, String topic, String group) throws Exception {
        Map<Integer, Long> out = new TreeMap<>();
        try (AdminClient admin = AdminClient.create(props)) {
            Map<TopicPartition, OffsetAndMetadata> answer =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : answer.entrySet()) {
                if (e.getKey().topic().equals(topic)) out.put(e.getKey().partition(), e.getValue().offset());
            }
        }
        return "{\"committed\":" + object(out) + "}";
    }

    private static String offsets(Properties props, String topic) {
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic)) partitions.add(new TopicPartition(topic, p.partition()));
            Map<Integer, Long> earliest = new TreeMap<>(), latest = new TreeMap<>();
            consumer.beginningOffsets(partitions).forEach((tp, o) -> earliest.put(tp.partition(), o));
            consumer.endOffsets(partitions).forEach((tp, o) -> latest.put(tp.partition(), o));
            return "{\"earliest\":" + object(earliest) + ",\"latest\":" + object(latest) + "}";
        }
    }

    /** The version kafka-clients' jar records in kafka/kafka-version.properties. */
    private static String version() throws java.io.IOException {
        Properties p = new Properties();
        try (java.io.InputStream in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            p.load(in);
        }
        return p.getProperty("version");
    }

    private static String key(String prefix, int i) { return prefix + "-" + i; }

    private static String value(String prefix, int i) { return "value " + i + " of " + prefix + " " + "x".repeat(100); }

    private static String record(int partition, long offset, String key, String value) {
        return "{\"partition\":" + partition + ",\"offset\":" + offset + ",\"key\":" + quote(key)
                + ",\"value\":" + quote(value) + "}";
    }

    private static String object(Map<Integer, Long> m) {
        List<String> fields = new ArrayList<>();
        m.forEach((k, v) -> fields.add("\"" + k + "\":" + v));
        return "{" + String.join(",", fields) + "}";
    }

    /** A JSON string: quotes, backslashes and control characters escaped. */
    private static String quote(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
