// Apache Kafka's Java admin client (4.x) against the API versions of Kafka 4.4 that Keel serves
// (issue 20): prints one "KEY values" line per observation for tests/python/test_api_versions.py
// to check; exits 1 with "FAILED: reason" if the scenario itself cannot run.
//
// Usage:
//   KeelKafka44Apis config-resources BOOTSTRAP
//     Admin.listConfigResources() (every type) and listConfigResources({TOPIC}); prints
//     "ALL type name" and "TOPIC name" lines (ListConfigResources v1, KIP-1142).
//   KeelKafka44Apis missing-group BOOTSTRAP GROUP
//     Admin.describeConsumerGroups of a group that does not exist; prints "DESCRIBE state" or
//     "DESCRIBE <exception class>" (DescribeGroups v6, KIP-1043).
//   KeelKafka44Apis cluster BOOTSTRAP
//     Admin.describeCluster with and without includeFencedBrokers; prints "ALL id fenced" and
//     "LIVE id" lines (DescribeCluster v2, KIP-1073).
//   KeelKafka44Apis producers BOOTSTRAP TOPIC PARTITION
//     Admin.describeProducers; prints "PRODUCER id epoch lastSequence lastTimestamp
//     coordinatorEpoch currentTransactionStartOffset" per producer (DescribeProducers v0).

import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;

public class KeelKafka44Apis {
    static void fail(String what) {
        System.out.println("FAILED: " + what);
        System.exit(1);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        Properties props = new Properties();
        props.put("bootstrap.servers", args[1]);
        try (Admin admin = Admin.create(props)) {
            switch (mode) {
                case "config-resources" -> configResources(admin);
                case "missing-group" -> missingGroup(admin, args[2]);
                case "cluster" -> cluster(admin);
                case "producers" -> producers(admin, new TopicPartition(args[2], Integer.parseInt(args[3])));
                default -> fail("unknown mode " + mode);
            }
        }
        System.exit(0);
    }

    static void configResources(Admin admin) throws Exception {
        List<String> all = new ArrayList<>();
        for (ConfigResource r : admin.listConfigResources().all().get()) {
            all.add("ALL " + r.type() + " " + r.name());
        }
        Collections.sort(all);
        all.forEach(System.out::println);
        List<String> topics = new ArrayList<>();
        for (ConfigResource r : admin.listConfigResources(Set.of(ConfigResource.Type.TOPIC),
                new ListConfigResourcesOptions()).all().get()) {
            topics.add("TOPIC " + r.name());
        }
        Collections.sort(topics);
        topics.forEach(System.out::println);
    }

    static void missingGroup(Admin admin, String group) {
        try {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            System.out.println("DESCRIBE " + d.groupState());
        } catch (Exception e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            System.out.println("DESCRIBE " + cause.getClass().getSimpleName());
        }
    }

    static void cluster(Admin admin) throws Exception {
        for (Node n : admin.describeCluster(new DescribeClusterOptions().includeFencedBrokers(true))
                .nodes().get()) {
            System.out.println("ALL " + n.id() + " " + n.isFenced());
        }
        for (Node n : admin.describeCluster().nodes().get()) {
            System.out.println("LIVE " + n.id());
        }
    }

    static void producers(Admin admin, TopicPartition tp) throws Exception {
        DescribeProducersResult.PartitionProducerState state =
                admin.describeProducers(List.of(tp)).partitionResult(tp).get();
        for (ProducerState p : state.activeProducers()) {
            System.out.println("PRODUCER " + p.producerId() + " " + p.producerEpoch() + " "
                    + p.lastSequence() + " " + p.lastTimestamp() + " "
                    + (p.coordinatorEpoch().isPresent() ? "" + p.coordinatorEpoch().getAsInt() : "-")
                    + " " + (p.currentTransactionStartOffset().isPresent()
                            ? "" + p.currentTransactionStartOffset().getAsLong() : "-"));
        }
    }
}
