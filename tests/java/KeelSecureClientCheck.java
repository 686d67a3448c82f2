// Apache Kafka's Java client (4.x) against a Keel listener that asks for security (TLS, mutual
// TLS, later SASL): the client settings come from a properties file, as Kafka's tools take them
// with --command-config. Creates the topic (replication factor RF), produces RECORDS records with
// acks=all, reads them back with an assign()-based consumer, and checks every value.
// Prints "SECURE-CLIENT-OK" and exits 0 when every check holds; on failure prints
// "SECURE-CLIENT-FAILED: <exception class>: <message>" and exits 1.
//
// Usage: KeelSecureClientCheck BOOTSTRAP CLIENT_PROPERTIES TOPIC RECORDS RF

import java.io.FileInputStream;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class KeelSecureClientCheck {
    public static void main(String[] args) {
        try {
            run(args);
            System.out.println("SECURE-CLIENT-OK");
        } catch (Throwable e) {
            Throwable root = e;
            while (root.getCause() != null && root.getCause() != root) {
                root = root.getCause();
            }
            System.out.println("SECURE-CLIENT-FAILED: " + e.getClass().getName() + ": " + e.getMessage()
                    + " (root: " + root.getClass().getName() + ": " + root.getMessage() + ")");
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        String bootstrap = args[0];
        Properties common = new Properties();
        try (FileInputStream in = new FileInputStream(args[1])) {
            common.load(in);
        }
        String topic = args[2];
        int records = Integer.parseInt(args[3]);
        short rf = Short.parseShort(args[4]);
        common.put("bootstrap.servers", bootstrap);
        common.put("request.timeout.ms", "15000");
        common.put("default.api.timeout.ms", "30000");
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, rf))).all().get(30, TimeUnit.SECONDS);
            if (admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).isEmpty()) {
                throw new IllegalStateException("describeCluster named no broker");
            }
        }
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("acks", "all");
        pp.put("delivery.timeout.ms", "60000");
        try (Producer<String, String> producer =
                new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < records; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)));
            }
            for (java.util.concurrent.Future<RecordMetadata> f : sent) {
                f.get(60, TimeUnit.SECONDS);
            }
        }
        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        try (Consumer<String, String> consumer =
                new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            List<String> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (got.size() < records && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(r.value());
                }
            }
            if (got.size() != records) {
                throw new IllegalStateException("read " + got.size() + " of " + records + " records");
            }
            for (int i = 0; i < records; i++) {
                if (!got.get(i).equals("v" + i)) {
                    throw new IllegalStateException("record " + i + " is " + got.get(i));
                }
            }
        }
    }
}
