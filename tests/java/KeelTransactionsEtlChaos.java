import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * The Java client's consume-transform-produce through a broker's kill -9 (issue 23). Usage:
 * KeelTransactionsEtlChaos <bootstrap> <input topic> <output topic> <group> <transactional id>.
 * Both topics have three partitions; the input is already written.
 *
 * A read_committed consumer (assigned the input's partitions, no group membership) and a
 * transactional producer (transactions v2) copy the input to the output, partition for
 * partition, in rounds of at most 25 records: each round's output and the consumer's next
 * positions (sendOffsetsToTransaction, so TxnOffsetCommit) go in one transaction, and every fifth
 * round is aborted and redone from the last committed positions. It prints "ROUND <n>" before
 * each, so the test can kill and restart brokers at given rounds. A commit or abort that times
 * out is called again (the client's contract); any other error but fencing aborts the round.
 * Done when every partition's committed position reached its end. Then the group's committed
 * offsets must be the input's end offsets and a read_committed read of the output must hold
 * each input record exactly once, in input order per partition. Prints JAVA-ETL-CHAOS-OK when
 * every check passed; exits 1 with the reason otherwise.
 */
public final class KeelTransactionsEtlChaos {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String in = args[1];
        String out = args[2];
        String group = args[3];
        String txnId = args[4];
        Map<Integer, List<String>> input = KeelTransactions.readAll(bootstrap, in, 3, "read_committed");
        List<TopicPartition> sources = new ArrayList<>();
        Map<TopicPartition, Long> ends = new HashMap<>();
        for (int part = 0; part < 3; part++) {
            TopicPartition tp = new TopicPartition(in, part);
            sources.add(tp);
            ends.put(tp, (long) input.getOrDefault(part, List.of()).size());
        }
        Map<TopicPartition, Long> committedAt = new HashMap<>();
        for (TopicPartition tp : sources) {
            committedAt.put(tp, 0L);
        }
        int commits = 0;
        int aborts = 0;
        int[] retried = {0};
        try (KafkaConsumer<String, String> c = KeelTransactions.consumer(bootstrap, "read_committed", group);
             KafkaProducer<String, String> p = KeelTransactions.producer(bootstrap, txnId)) {
            p.initTransactions();
            c.assign(sources);
            long deadline = System.currentTimeMillis() + 240_000;
            int round = 0;
            while (!committedAt.equals(ends)) {
                KeelTransactions.check(System.currentTimeMillis() < deadline,
                        "not done after 240 s: committed " + committedAt + " of " + ends);
                System.out.println("ROUND " + round);
                System.out.flush();
                for (TopicPartition tp : sources) {
                    c.seek(tp, committedAt.get(tp));
                }
                List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                long pollUntil = System.currentTimeMillis() + 2_000;
                while (batch.size() < 25 && System.currentTimeMillis() < pollUntil) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                        if (batch.size() < 25) {
                            batch.add(r);
                        }
                    }
                }
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<String, String> r : batch) {
                    next.put(new TopicPartition(in, r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                if (next.isEmpty()) {
                    round++;
                    continue;
                }
                boolean commit = round % 5 != 4;
                String what = "round " + round;
                commit = KeelTransactionsChaos.transaction(p, what, commit, () -> {
                    for (ConsumerRecord<String, String> r : batch) {
                        p.send(new ProducerRecord<>(out, r.partition(), null, r.value().replace("in-", "out-")));
                    }
                    p.sendOffsetsToTransaction(next, c.groupMetadata());
                }, retried);
                if (commit) {
                    commits++;
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : next.entrySet()) {
                        committedAt.put(e.getKey(), e.getValue().offset());
                    }
                } else {
                    aborts++;
                }
                round++;
            }
            Map<TopicPartition, OffsetAndMetadata> stored = c.committed(new HashSet<>(sources));
            for (TopicPartition tp : sources) {
                OffsetAndMetadata o = stored.get(tp);
                long at = o == null ? 0 : o.offset();
                KeelTransactions.check(at == ends.get(tp), "group offset of " + tp + " is " + at
                        + ", the input ends at " + ends.get(tp));
            }
        }
        System.out.println(commits + " rounds committed, " + aborts + " aborted, " + retried[0] + " calls retried");
        Map<Integer, List<String>> output = KeelTransactions.readAll(bootstrap, out, 3, "read_committed");
        for (int part = 0; part < 3; part++) {
            List<String> want = new ArrayList<>();
            for (String v : input.getOrDefault(part, List.of())) {
                want.add(v.replace("in-", "out-"));
            }
            List<String> got = output.getOrDefault(part, List.of());
            if (!got.equals(want)) {
                Set<String> seen = new HashSet<>();
                List<String> twice = new ArrayList<>();
                for (String v : got) {
                    if (!seen.add(v)) {
                        twice.add(v);
                    }
                }
                List<String> missing = new ArrayList<>(want);
                missing.removeAll(got);
                KeelTransactions.check(false, "output partition " + part + ": " + got.size() + " records for "
                        + want.size() + " inputs; duplicated " + twice + ", missing " + missing);
            }
        }
        KeelTransactions.check(aborts >= 1 && commits >= 1, commits + " commits and " + aborts + " aborts");
        System.out.println("JAVA-ETL-CHAOS-OK");
    }
}
