// Issue 23's Kafka Streams story: a word count with processing.guarantee=exactly_once_v2. Each
// input line's words are counted (flatMapValues, groupBy word, count) into OUTPUT_TOPIC; Streams
// commits its input offsets, its changelog and its output in one transaction per commit, so a
// crash of any broker mid-run must neither lose nor double-count a word.
//
// Usage: KeelStreamsEos BOOTSTRAP APPLICATION_ID INPUT_TOPIC OUTPUT_TOPIC STATE_DIR LINES
//   Runs until the input holds LINES records and the application's committed offsets reach the
//   end of every input partition (Admin.listConsumerGroupOffsets against Admin.listOffsets
//   latest; the input is not transactional, so offsets count records), then prints
//   "EOS-DONE <committed offsets>" and exits; after 180 s "EOS-TIMEOUT <offsets> <state>".

import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Produced;

public class KeelStreamsEos {
    static final long WAIT_MS = 180_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3];
        String stateDir = args[4];
        long lines = Long.parseLong(args[5]);

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.split(" ")))
            .groupBy((key, word) -> word, Grouped.with("by-word", Serdes.String(), Serdes.String()))
            .count()
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        long deadline = System.currentTimeMillis() + WAIT_MS;
        String committed = "";
        try (KafkaStreams streams = new KafkaStreams(builder.build(), props);
             Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            streams.start();
            while (System.currentTimeMillis() < deadline) {
                Thread.sleep(500);
                try {
                    Map<TopicPartition, Long> ends = latest(admin, input);
                    Map<TopicPartition, OffsetAndMetadata> done = admin.listConsumerGroupOffsets(appId)
                        .partitionsToOffsetAndMetadata().get();
                    committed = done.toString();
                    long total = ends.values().stream().mapToLong(Long::longValue).sum();
                    boolean all = !ends.isEmpty() && total >= lines;
                    for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
                        OffsetAndMetadata o = done.get(e.getKey());
                        all &= o != null && o.offset() >= e.getValue();
                    }
                    if (all) {
                        System.out.println("EOS-DONE " + committed);
                        streams.close(Duration.ofSeconds(20));
                        System.exit(0);
                    }
                } catch (Exception e) {
                    // a broker is down: ask again
                }
            }
            System.out.println("EOS-TIMEOUT " + committed + " state=" + streams.state());
            streams.close(Duration.ofSeconds(20));
        }
        System.exit(1);
    }

    static Map<TopicPartition, Long> latest(Admin admin, String topic) throws Exception {
        List<TopicPartitionInfo> partitions = admin.describeTopics(List.of(topic))
            .allTopicNames().get().get(topic).partitions();
        Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
        for (TopicPartitionInfo p : partitions) {
            specs.put(new TopicPartition(topic, p.partition()), OffsetSpec.latest());
        }
        Map<TopicPartition, Long> out = new HashMap<>();
        admin.listOffsets(specs).all().get().forEach((tp, info) -> out.put(tp, info.offset()));
        return out;
    }
}
