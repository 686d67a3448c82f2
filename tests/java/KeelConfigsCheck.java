// Apache Kafka's Java client (4.x) against per-record produce errors, topic configs and
// DescribeConfigs (issue 20). Prints one "KEY value" line per observation for
// tests/python/test_configs_produce.py to check; exits 1 with "FAILED: reason" if the scenario
// itself cannot run.
//
// Usage:
//   KeelConfigsCheck records BOOTSTRAP TOPIC KEYS
//     The producer with its default settings (idempotent, acks=all) writes a first record, then
//     one batch of records whose keys are KEYS (comma-separated, "-" for none) and whose
//     timestamps are now, except a key of the form "late" which is two hours ahead. Prints
//     "SEND i OK offset" or "SEND i <exception class> <message>" for each, then sends the records
//     that failed only as part of the batch again and prints "RETRY i ...".
//   KeelConfigsCheck describe BOOTSTRAP TOPIC BROKER
//     Admin.describeConfigs of the topic and of broker BROKER with includeDocumentation and
//     includeSynonyms; prints "TOPIC name|value|source|readOnly|type|documented|synonyms" and
//     "BROKER ..." for every entry.
//   KeelConfigsCheck alter BOOTSTRAP TOPIC NAME=VALUE...
//     Admin.incrementalAlterConfigs SET of each pair, one request per pair; prints
//     "ALTER name OK" or "ALTER name <exception class> <message>".

import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KeelConfigsCheck {
    static final long TWO_HOURS_MS = 2 * 3_600_000L;

    static void fail(String what) {
        System.out.println("FAILED: " + what);
        System.exit(1);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2];
        switch (mode) {
            case "records" -> records(bootstrap, topic, args[3].split(","));
            case "describe" -> describe(bootstrap, topic, args[3]);
            case "alter" -> alter(bootstrap, topic, Arrays.copyOfRange(args, 3, args.length));
            default -> fail("unknown mode " + mode);
        }
        System.exit(0);
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        // Every send before flush() goes into one batch.
        props.put("linger.ms", "60000");
        props.put("delivery.timeout.ms", "120000");
        return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** "OK offset" or "<exception class> <message>" (the cause of an ExecutionException). */
    static String outcome(Future<RecordMetadata> future) throws InterruptedException {
        try {
            return "OK " + future.get().offset();
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            return cause.getClass().getSimpleName() + " " + cause.getMessage();
        }
    }

    static ProducerRecord<byte[], byte[]> record(String topic, String key, int i, long now) {
        long timestamp = key.equals("late") ? now + TWO_HOURS_MS : now;
        byte[] k = key.equals("-") ? null : bytes(key);
        return new ProducerRecord<>(topic, 0, timestamp, k, bytes("value-" + i));
    }

    static void records(String bootstrap, String topic, String[] keys) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap)) {
            Future<RecordMetadata> first = producer.send(new ProducerRecord<>(topic, 0, bytes("first"), bytes("first")));
            producer.flush();
            System.out.println("FIRST " + outcome(first));
            long now = System.currentTimeMillis();
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < keys.length; i++) {
                sent.add(producer.send(record(topic, keys[i], i, now)));
            }
            producer.flush();
            List<Integer> innocent = new ArrayList<>();
            for (int i = 0; i < keys.length; i++) {
                String outcome = outcome(sent.get(i));
                System.out.println("SEND " + i + " " + outcome);
                if (outcome.startsWith("KafkaException ")) {
                    innocent.add(i);
                }
            }
            // The records that failed only because their batch did are fine on their own.
            List<Future<RecordMetadata>> again = new ArrayList<>();
            for (int i : innocent) {
                again.add(producer.send(record(topic, keys[i], i, System.currentTimeMillis())));
            }
            producer.flush();
            for (int j = 0; j < innocent.size(); j++) {
                System.out.println("RETRY " + innocent.get(j) + " " + outcome(again.get(j)));
            }
        }
    }

    static void describe(String bootstrap, String topic, String broker) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(props)) {
            ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            ConfigResource brokerResource = new ConfigResource(ConfigResource.Type.BROKER, broker);
            DescribeConfigsOptions options = new DescribeConfigsOptions()
                .includeDocumentation(true)
                .includeSynonyms(true);
            Map<ConfigResource, Config> configs = admin.describeConfigs(
                List.of(topicResource, brokerResource), options).all().get();
            print("TOPIC", configs.get(topicResource));
            print("BROKER", configs.get(brokerResource));
        }
    }

    static void print(String prefix, Config config) {
        List<ConfigEntry> entries = new ArrayList<>(config.entries());
        entries.sort(Comparator.comparing(ConfigEntry::name));
        for (ConfigEntry e : entries) {
            StringBuilder synonyms = new StringBuilder();
            for (ConfigEntry.ConfigSynonym s : e.synonyms()) {
                synonyms.append(s.name()).append("=").append(s.value()).append(":").append(s.source()).append(";");
            }
            boolean documented = e.documentation() != null && !e.documentation().isEmpty();
            System.out.println(prefix + " " + String.join("|", e.name(), String.valueOf(e.value()),
                e.source().toString(), String.valueOf(e.isReadOnly()), e.type().toString(),
                String.valueOf(documented), synonyms.toString()));
        }
    }

    static void alter(String bootstrap, String topic, String[] pairs) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(props)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            for (String pair : pairs) {
                String[] kv = pair.split("=", 2);
                AlterConfigOp op = new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET);
                try {
                    admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
                    System.out.println("ALTER " + kv[0] + " OK");
                } catch (ExecutionException e) {
                    Throwable cause = e.getCause();
                    System.out.println("ALTER " + kv[0] + " " + cause.getClass().getSimpleName() + " " + cause.getMessage());
                }
            }
        }
    }
}
