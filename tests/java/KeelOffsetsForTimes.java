// Apache Kafka's Java client (4.x) looking offsets up by time (issue 20): prints one "KEY values"
// line per observation for tests/python/test_offsets_for_times.py to check; exits 1 with
// "FAILED: reason" if the scenario itself cannot run.
//
// Usage:
//   KeelOffsetsForTimes produce BOOTSTRAP TOPIC PARTITION COMPRESSION TS[,TS...]
//     One record per timestamp, sent together so the producer makes them one batch
//     (linger.ms 5 s, a 1 MiB batch, then flush); prints "OFFSET i offset" per record.
//   KeelOffsetsForTimes times BOOTSTRAP TOPIC PARTITION TARGET[,TARGET...]
//     KafkaConsumer.offsetsForTimes for each target alone; prints
//     "FOUND target offset timestamp leaderEpoch" ("-" for an absent epoch) or "FOUND target none".
//   KeelOffsetsForTimes specs BOOTSTRAP TOPIC PARTITION
//     Admin.listOffsets with OffsetSpec.earliest(), latest() and maxTimestamp(); prints
//     "SPEC name offset timestamp leaderEpoch".

import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class KeelOffsetsForTimes {
    static void fail(String what) {
        System.out.println("FAILED: " + what);
        System.exit(1);
    }

    static String epoch(Optional<Integer> e) {
        return e.map(String::valueOf).orElse("-");
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2];
        TopicPartition tp = new TopicPartition(topic, Integer.parseInt(args[3]));
        switch (mode) {
            case "produce" -> produce(bootstrap, tp, args[4], args[5]);
            case "times" -> times(bootstrap, tp, args[4]);
            case "specs" -> specs(bootstrap, tp);
            default -> fail("unknown mode " + mode);
        }
        System.exit(0);
    }

    static void produce(String bootstrap, TopicPartition tp, String compression, String timestamps)
            throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("compression.type", compression);
        props.put("linger.ms", "5000");
        props.put("batch.size", String.valueOf(1 << 20));
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            String[] ts = timestamps.split(",");
            for (int i = 0; i < ts.length; i++) {
                sent.add(producer.send(new ProducerRecord<>(tp.topic(), tp.partition(),
                        Long.parseLong(ts[i]), "k" + i, "value-" + i)));
            }
            producer.flush();
            for (int i = 0; i < sent.size(); i++) {
                System.out.println("OFFSET " + i + " " + sent.get(i).get().offset());
            }
        }
    }

    static void times(String bootstrap, TopicPartition tp, String targets) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            for (String target : targets.split(",")) {
                Map<TopicPartition, OffsetAndTimestamp> found = consumer.offsetsForTimes(
                        Map.of(tp, Long.parseLong(target)), Duration.ofSeconds(30));
                OffsetAndTimestamp ot = found.get(tp);
                if (ot == null) {
                    System.out.println("FOUND " + target + " none");
                } else {
                    System.out.println("FOUND " + target + " " + ot.offset() + " " + ot.timestamp()
                            + " " + epoch(ot.leaderEpoch()));
                }
            }
        }
    }

    static void specs(String bootstrap, TopicPartition tp) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        Map<String, OffsetSpec> specs = new LinkedHashMap<>();
        specs.put("earliest", OffsetSpec.earliest());
        specs.put("latest", OffsetSpec.latest());
        specs.put("max", OffsetSpec.maxTimestamp());
        try (Admin admin = Admin.create(props)) {
            for (Map.Entry<String, OffsetSpec> spec : specs.entrySet()) {
                ListOffsetsResult.ListOffsetsResultInfo info =
                        admin.listOffsets(Map.of(tp, spec.getValue())).partitionResult(tp).get();
                System.out.println("SPEC " + spec.getKey() + " " + info.offset() + " "
                        + info.timestamp() + " " + epoch(info.leaderEpoch()));
            }
        }
    }
}
