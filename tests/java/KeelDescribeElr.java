// Apache Kafka's Java Admin client (4.x) describes topics on Keel and prints each partition's
// eligible leader replicas (KIP-966), which Admin.describeTopics reads from DescribeTopicPartitions
// (API 75; it falls back to Metadata, which carries no ELR, when a broker does not serve it).
//
// Usage: KeelDescribeElr <bootstrap> <topic> [<topic>...]
// Prints one line per partition, sorted by topic and partition:
//   PARTITION topic=T partition=0 leader=0 replicas=0,1,2 isr=0 elr=1 lastKnownElr=
// (ids comma-separated, empty for an empty list, "null" when the client got no ELR at all,
// leader=-1 for none), then "DESCRIBE-ELR-OK". Exits 1 with "DESCRIBE-ELR-FAILED: ..." on an error.

import java.util.*;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;

public class KeelDescribeElr {
    static String ids(List<Node> nodes) {
        if (nodes == null) return "null";
        return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
    }

    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("default.api.timeout.ms", "20000");
        props.put("request.timeout.ms", "10000");
        List<String> topics = Arrays.asList(args).subList(1, args.length);
        try (Admin admin = Admin.create(props)) {
            Map<String, TopicDescription> described = admin.describeTopics(topics).allTopicNames().get();
            for (String topic : new TreeSet<>(described.keySet())) {
                List<TopicPartitionInfo> parts = new ArrayList<>(described.get(topic).partitions());
                parts.sort(Comparator.comparingInt(TopicPartitionInfo::partition));
                for (TopicPartitionInfo p : parts) {
                    System.out.println("PARTITION topic=" + topic
                            + " partition=" + p.partition()
                            + " leader=" + (p.leader() == null ? -1 : p.leader().id())
                            + " replicas=" + ids(p.replicas())
                            + " isr=" + ids(p.isr())
                            + " elr=" + ids(p.elr())
                            + " lastKnownElr=" + ids(p.lastKnownElr()));
                }
            }
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.out.println("DESCRIBE-ELR-FAILED: " + cause);
            System.exit(1);
        }
        System.out.println("DESCRIBE-ELR-OK");
    }
}
