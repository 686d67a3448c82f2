// Apache Kafka's Java client (4.x) deleting records and reading below the log start offset
// (issue 20: DeleteRecords, API 21). Prints one "KEY value" line per observation for
// tests/python/test_delete_records.py to check; exits 1 with "FAILED: reason" if the scenario
// itself cannot run.
//
// Usage:
//   KeelDeleteRecords delete BOOTSTRAP TOPIC PARTITION OFFSET TIMEOUT_MS
//     Admin.deleteRecords(TOPIC-PARTITION before OFFSET) with DeleteRecordsOptions.timeoutMs;
//     prints "DELETED <low watermark>" or "ERROR <exception class>" (the cause of the future's
//     ExecutionException, e.g. OffsetOutOfRangeException, PolicyViolationException,
//     TimeoutException).
//   KeelDeleteRecords consume BOOTSTRAP TOPIC PARTITION SEEK_OFFSET AUTO_OFFSET_RESET
//     A consumer (no group) assigned TOPIC-PARTITION, positioned at SEEK_OFFSET, with
//     auto.offset.reset=AUTO_OFFSET_RESET; prints "FIRST <offset>" of the first record it reads,
//     or "ERROR <exception class>" (e.g. OffsetOutOfRangeException with "none").

import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class KeelDeleteRecords {
    static final Duration READ_FOR = Duration.ofSeconds(30);

    static void fail(String what) {
        System.out.println("FAILED: " + what);
        System.exit(1);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            fail("usage: delete|consume BOOTSTRAP TOPIC PARTITION OFFSET TIMEOUT_MS|RESET");
        }
        String mode = args[0], bootstrap = args[1], topic = args[2];
        TopicPartition tp = new TopicPartition(topic, Integer.parseInt(args[3]));
        long offset = Long.parseLong(args[4]);
        if (mode.equals("delete")) {
            delete(bootstrap, tp, offset, Integer.parseInt(args[5]));
        } else if (mode.equals("consume")) {
            consume(bootstrap, tp, offset, args[5]);
        } else {
            fail("unknown mode " + mode);
        }
        System.exit(0);
    }

    static void delete(String bootstrap, TopicPartition tp, long offset, int timeoutMs) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(props)) {
            DeleteRecordsResult result = admin.deleteRecords(
                Map.of(tp, RecordsToDelete.beforeOffset(offset)),
                new DeleteRecordsOptions().timeoutMs(timeoutMs));
            try {
                DeletedRecords deleted = result.lowWatermarks().get(tp).get();
                System.out.println("DELETED " + deleted.lowWatermark());
            } catch (ExecutionException e) {
                System.out.println("ERROR " + e.getCause().getClass().getSimpleName());
            }
        }
    }

    static void consume(String bootstrap, TopicPartition tp, long seek, String reset) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("auto.offset.reset", reset);
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, seek);
            long deadline = System.nanoTime() + READ_FOR.toNanos();
            while (System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(500));
                } catch (RuntimeException e) {
                    System.out.println("ERROR " + e.getClass().getSimpleName());
                    return;
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    System.out.println("FIRST " + r.offset());
                    return;
                }
            }
            fail("no record and no error in " + READ_FOR);
        }
    }
}
