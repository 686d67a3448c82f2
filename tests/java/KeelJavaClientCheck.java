// Apache Kafka's Java client (4.x) against Keel: admin (create, describe, configs), a producer
// per compression with acks=all and the producer's default settings (idempotence on: InitProducerId and
// sequenced batches), an assign()-based consumer that reads everything back, and a group
// consumer (subscribe, commitSync, committed offsets read back).
// Prints "JAVA-CLIENT-OK" and exits 0 when every check holds; exits 1 with the reason otherwise.
//
// Usage: KeelJavaClientCheck BOOTSTRAP RECORDS_PER_COMPRESSION BROKERS (the cluster's size)

import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class KeelJavaClientCheck {
    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("JAVA-CLIENT-FAILED: " + what);
            System.exit(1);
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        int perCompression = Integer.parseInt(args[1]);
        int brokers = Integer.parseInt(args[2]);
        String topic = "java-check-" + System.currentTimeMillis();
        int partitions = 3;

        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)
                    .configs(Map.of("retention.ms", "86400000")))).all().get();
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            check(d.partitions().size() == partitions, "describeTopics partitions " + d.partitions().size());
            check(d.partitions().get(0).leader() != null, "describeTopics leader");
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET)))).all().get();
            Config config = admin.describeConfigs(List.of(res)).all().get().get(res);
            check("3600000".equals(config.get("retention.ms").value()), "describeConfigs retention.ms");
            check(admin.listTopics().names().get().contains(topic), "listTopics");
            check(admin.describeCluster().nodes().get().size() == brokers, "describeCluster");
        }

        String[] compressions = {"none", "gzip", "snappy", "lz4", "zstd"};
        Map<Integer, List<String>> expected = new TreeMap<>();
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("acks", "all");
        pp.put("linger.ms", "5");
        pp.put("batch.size", "16384");
        for (String compression : compressions) {
            pp.put("compression.type", compression);
            try (Producer<String, String> producer =
                         new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < perCompression; i++) {
                    int p = i % partitions;
                    String value = compression + "-" + i;
                    sent.add(producer.send(new ProducerRecord<>(topic, p, 1_700_000_000_000L + i, "k" + i, value)));
                    expected.computeIfAbsent(p, x -> new ArrayList<>()).add(value);
                }
                for (Future<RecordMetadata> f : sent) {
                    f.get();
                }
            }
        }

        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("enable.auto.commit", "false");
        cp.put("auto.offset.reset", "earliest");
        Map<Integer, List<String>> seen = new TreeMap<>();
        int total = perCompression * compressions.length;
        int count = 0;
        try (Consumer<String, String> consumer =
                     new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 60_000;
            while (count < total && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    List<String> list = seen.computeIfAbsent(r.partition(), x -> new ArrayList<>());
                    check(r.offset() == list.size(), "offset " + r.offset() + " at position " + list.size());
                    list.add(r.value());
                    count++;
                }
            }
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            for (TopicPartition tp : tps) {
                check(end.get(tp) == expected.get(tp.partition()).size(), "endOffsets " + tp);
            }
        }
        check(count == total, "consumed " + count + " of " + total);
        check(seen.equals(expected), "consumed values differ from produced values");

        // A group consumer with the client's defaults (classic protocol): subscribe, read
        // everything once, commit, and find the commit again from a new consumer.
        Properties gp = new Properties();
        gp.putAll(common);
        gp.put("group.id", "java-check-" + topic);
        gp.put("auto.offset.reset", "earliest");
        gp.put("enable.auto.commit", "false");
        int grouped = 0;
        List<TopicPartition> all = new ArrayList<>();
        for (int p = 0; p < partitions; p++) all.add(new TopicPartition(topic, p));
        try (Consumer<String, String> consumer =
                     new KafkaConsumer<>(gp, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (grouped < total && System.currentTimeMillis() < deadline) {
                grouped += consumer.poll(Duration.ofMillis(500)).count();
            }
            check(consumer.assignment().size() == partitions, "group assignment " + consumer.assignment());
            consumer.commitSync();
        }
        check(grouped == total, "group consumer read " + grouped + " of " + total);
        try (Consumer<String, String> again =
                     new KafkaConsumer<>(gp, new StringDeserializer(), new StringDeserializer())) {
            Map<TopicPartition, OffsetAndMetadata> committed = again.committed(new HashSet<>(all));
            for (TopicPartition tp : all) {
                long want = expected.get(tp.partition()).size();
                check(committed.get(tp) != null && committed.get(tp).offset() == want,
                        "committed " + tp + " = " + committed.get(tp) + ", want " + want);
            }
        }
        System.out.println("JAVA-CLIENT-OK records=" + count + " group=" + grouped);
    }
}
