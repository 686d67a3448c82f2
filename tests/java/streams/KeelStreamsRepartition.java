// The user story of issue 20's DeleteRecords: a Kafka Streams 4.4 application with a groupBy
// writes its records through a repartition topic (created by Streams with retention.ms=-1) and,
// after each commit, trims what it has consumed from it with Admin.deleteRecords
// (RepartitionTopics / TaskManager.maybePurgeCommittedRecords). Against a broker without
// DeleteRecords the admin client refuses locally, Streams logs it at DEBUG, and the repartition
// topic keeps every record forever.
//
// Usage: KeelStreamsRepartition BOOTSTRAP APPLICATION_ID INPUT_TOPIC RECORDS STATE_DIR
//   Counts INPUT_TOPIC's records grouped by value (commit.interval.ms and
//   repartition.purge.interval.ms 100 ms); once the counts cover RECORDS input records, waits
//   until every partition of the repartition topic APPLICATION_ID-by-value-repartition has a log
//   start offset above 0 (Admin.listOffsets earliest) and prints "TRIMMED <partition>=<offset>,..."
//   — or, after 60 s, "NOT_TRIMMED <offsets>" — and exits.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;

public class KeelStreamsRepartition {
    static final long WAIT_MS = 60_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2];
        long records = Long.parseLong(args[3]);
        String stateDir = args[4];
        String repartition = appId + "-by-value-repartition";

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);

        AtomicLong counted = new AtomicLong();
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .groupBy((key, value) -> value, Grouped.with("by-value", Serdes.String(), Serdes.String()))
            .count()
            .toStream()
            .foreach((value, count) -> counted.incrementAndGet());

        long deadline = System.currentTimeMillis() + WAIT_MS;
        String offsets = "";
        try (KafkaStreams streams = new KafkaStreams(builder.build(), props);
             Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            streams.start();
            while (System.currentTimeMillis() < deadline) {
                Thread.sleep(200);
                if (counted.get() < records) {
                    continue; // every update is counted once the cache is off
                }
                Map<TopicPartition, Long> starts = earliest(admin, repartition);
                offsets = starts.toString();
                if (!starts.isEmpty() && starts.values().stream().allMatch(o -> o > 0)) {
                    System.out.println("TRIMMED " + offsets + " counted=" + counted.get());
                    streams.close(Duration.ofSeconds(10));
                    System.exit(0);
                }
            }
            System.out.println("NOT_TRIMMED " + offsets + " counted=" + counted.get()
                + " state=" + streams.state());
            streams.close(Duration.ofSeconds(10));
        }
        System.exit(0);
    }

    /** The log start offset of every partition of `topic` (empty until it exists). */
    static Map<TopicPartition, Long> earliest(Admin admin, String topic) {
        try {
            List<TopicPartitionInfo> partitions = admin.describeTopics(List.of(topic))
                .allTopicNames().get().get(topic).partitions();
            Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
            for (TopicPartitionInfo p : partitions) {
                specs.put(new TopicPartition(topic, p.partition()), OffsetSpec.earliest());
            }
            Map<TopicPartition, Long> out = new TreeMap<>(Comparator.comparingInt(TopicPartition::partition));
            admin.listOffsets(specs).all().get().forEach((tp, info) -> out.put(tp, info.offset()));
            return out;
        } catch (Exception e) {
            return Map.of();
        }
    }
}
