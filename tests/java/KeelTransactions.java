import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client's transactions against Keel (issue 23). Usage:
 * KeelTransactions <bootstrap> <replication factor> <suffix>.
 *
 * 1. A transactional producer writes 20 transactions of 10 records over three partitions,
 *    committing the even ones and aborting the odd ones (each flushed first, so the aborted
 *    records are in the log); a read_committed consumer reads exactly the committed records, each
 *    partition in order, and a read_uncommitted one reads all 200. The producer uses
 *    transactions v2 (Keel finalizes transaction.version=2): DescribeTransactions shows its epoch
 *    bumped by every transaction end.
 * 2. Consume-transform-produce with sendOffsetsToTransaction: 100 input records processed in
 *    rounds of 10, every third round aborted and redone; the output holds each input once and
 *    the group's committed offset ends at 100.
 * Prints JAVA-TXN-OK when every check passed; exits 1 with the reason otherwise.
 */
public final class KeelTransactions {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        short rf = Short.parseShort(args[1]);
        String suffix = args[2];
        String out = "txn-java-out-" + suffix;
        String in = "txn-java-in-" + suffix;
        String etl = "txn-java-etl-" + suffix;
        Properties a = new Properties();
        a.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic(out, 3, rf), new NewTopic(in, 1, rf),
                    new NewTopic(etl, 1, rf))).all().get();
        }
        Map<Integer, List<String>> committed = new HashMap<>();
        String txnId = "keel-java-txn-" + suffix;
        try (KafkaProducer<String, String> p = producer(bootstrap, txnId)) {
            p.initTransactions();
            for (int t = 0; t < 20; t++) {
                p.beginTransaction();
                for (int i = 0; i < 10; i++) {
                    int partition = i % 3;
                    String value = "t" + t + "-r" + i;
                    p.send(new ProducerRecord<>(out, partition, null, value));
                    if (t % 2 == 0) {
                        committed.computeIfAbsent(partition, k -> new ArrayList<>()).add(value);
                    }
                }
                p.flush();
                if (t % 2 == 0) {
                    p.commitTransaction();
                } else {
                    p.abortTransaction();
                }
            }
        }
        Map<Integer, List<String>> seen = readAll(bootstrap, out, 3, "read_committed");
        check(seen.equals(committed), "read_committed saw " + seen + " instead of " + committed);
        int all = readAll(bootstrap, out, 3, "read_uncommitted").values().stream().mapToInt(List::size).sum();
        check(all == 200, "read_uncommitted saw " + all + " records instead of 200");
        try (Admin admin = Admin.create(a)) {
            // Transactions v2 (KIP-890, finalized by Keel): every transaction end bumps the epoch.
            int epoch = admin.describeTransactions(List.of(txnId)).description(txnId).get().producerEpoch();
            check(epoch >= 20, "the producer used transactions v1: epoch " + epoch + " after 20 transactions");
        }

        try (KafkaProducer<String, String> plain = new KafkaProducer<>(plainProps(bootstrap))) {
            for (int i = 0; i < 100; i++) {
                plain.send(new ProducerRecord<>(in, 0, null, "in-" + i));
            }
            plain.flush();
        }
        String group = "keel-java-etl-" + suffix;
        TopicPartition source = new TopicPartition(in, 0);
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "read_committed", group);
             KafkaProducer<String, String> p = producer(bootstrap, "keel-java-etl-" + suffix)) {
            p.initTransactions();
            c.assign(List.of(source));
            long position = 0;
            int round = 0;
            while (position < 100) {
                c.seek(source, position);
                List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                long deadline = System.currentTimeMillis() + 30_000;
                while (batch.size() < 10 && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        if (batch.size() < 10) {
                            batch.add(r);
                        }
                    }
                }
                check(batch.size() == 10, "round " + round + " read " + batch.size() + " records");
                p.beginTransaction();
                for (ConsumerRecord<String, String> r : batch) {
                    p.send(new ProducerRecord<>(etl, 0, null, r.value().replace("in-", "out-")));
                }
                long next = batch.get(batch.size() - 1).offset() + 1;
                p.sendOffsetsToTransaction(Map.of(source, new OffsetAndMetadata(next)), c.groupMetadata());
                p.flush();
                if (round % 3 == 2) {
                    p.abortTransaction();
                } else {
                    p.commitTransaction();
                    position = next;
                }
                OffsetAndMetadata stored = c.committed(Set.of(source)).get(source);
                long storedOffset = stored == null ? 0 : stored.offset();
                check(storedOffset == position, "round " + round + ": committed offset " + storedOffset
                        + ", expected " + position);
                round++;
            }
        }
        List<String> output = readAll(bootstrap, etl, 1, "read_committed").get(0);
        List<String> expected = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            expected.add("out-" + i);
        }
        check(output.equals(expected), "the output holds " + output.size() + " records: " + output);
        System.out.println("JAVA-TXN-OK");
    }

    static void check(boolean ok, String reason) {
        if (!ok) {
            System.out.println("FAILED: " + reason);
            System.exit(1);
        }
    }

    static Properties plainProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties p = plainProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String isolation, String group) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    /** Every record of the topic's partitions up to their end for this isolation level. */
    static Map<Integer, List<String>> readAll(String bootstrap, String topic, int partitions, String isolation) {
        Map<Integer, List<String>> got = new HashMap<>();
        try (KafkaConsumer<String, String> c = consumer(bootstrap, isolation, "unused-" + topic)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) {
                tps.add(new TopicPartition(topic, i));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    done &= c.position(tp) >= ends.get(tp);
                }
                if (done) {
                    break;
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    got.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.value());
                }
            }
        }
        return got;
    }
}
