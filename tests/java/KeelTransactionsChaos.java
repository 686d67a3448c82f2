import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;

/**
 * The Java client's transactions through a broker's kill -9 (issue 23). Usage:
 * KeelTransactionsChaos <bootstrap> <topic (three partitions)> <transactional id> <transactions>.
 *
 * One transactional producer (transactions v2) writes one record per partition per transaction
 * ("t<n>-p<p>") and commits, every fourth transaction aborting instead; it prints "ROUND <n>"
 * before each, so the test can kill and restart brokers at given rounds. A commit or abort that
 * times out is called again (the Java client's contract for TimeoutException); any other
 * error but fencing aborts the transaction. Then a read_committed consumer must read exactly the
 * records of the transactions the producer saw committed, each partition in order, and none of
 * an aborted one. Prints JAVA-TXN-CHAOS-OK when every check passed; exits 1 with the reason
 * otherwise.
 */
public final class KeelTransactionsChaos {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String txnId = args[2];
        int count = Integer.parseInt(args[3]);
        Map<Integer, List<String>> committed = new HashMap<>();
        int commits = 0;
        int aborts = 0;
        int[] retried = {0};
        try (KafkaProducer<String, String> p = KeelTransactions.producer(bootstrap, txnId)) {
            p.initTransactions();
            for (int n = 0; n < count; n++) {
                System.out.println("ROUND " + n);
                System.out.flush();
                boolean commit = n % 4 != 3;
                List<String> values = new ArrayList<>();
                int round = n;
                commit = transaction(p, "transaction " + n, commit, () -> {
                    for (int part = 0; part < 3; part++) {
                        String value = "t" + round + "-p" + part;
                        values.add(value);
                        p.send(new ProducerRecord<>(topic, part, null, value));
                    }
                }, retried);
                if (commit) {
                    commits++;
                    for (int part = 0; part < 3; part++) {
                        committed.computeIfAbsent(part, k -> new ArrayList<>()).add(values.get(part));
                    }
                } else {
                    aborts++;
                }
            }
        }
        System.out.println(commits + " committed, " + aborts + " aborted, " + retried[0] + " calls retried");
        Map<Integer, List<String>> seen = KeelTransactions.readAll(bootstrap, topic, 3, "read_committed");
        for (int part = 0; part < 3; part++) {
            List<String> want = committed.getOrDefault(part, List.of());
            List<String> got = seen.getOrDefault(part, List.of());
            KeelTransactions.check(got.equals(want), "partition " + part + ": read_committed saw " + got
                    + " instead of " + want);
        }
        KeelTransactions.check(commits >= count / 2, "only " + commits + " of " + count + " transactions committed");
        System.out.println("JAVA-TXN-CHAOS-OK");
    }

    /**
     * One transaction: begins it, runs {@code body} (the sends), flushes, then commits it — or
     * aborts it if {@code commit} is false or anything but fencing failed. A commit or abort that
     * times out is called again (the client's contract), counted in {@code retried[0]}; a failed
     * commit is aborted instead. Returns whether it committed. {@code what} names it in output.
     */
    static boolean transaction(KafkaProducer<String, String> p, String what, boolean commit, Runnable body,
                               int[] retried) {
        try {
            p.beginTransaction();
            body.run();
            p.flush();
        } catch (ProducerFencedException e) {
            throw e;
        } catch (KafkaException e) {
            System.out.println(what + ": " + e + "; aborting it");
            commit = false;
        }
        while (true) {
            try {
                if (commit) {
                    p.commitTransaction();
                } else {
                    p.abortTransaction();
                }
                return commit;
            } catch (TimeoutException e) {
                retried[0]++; // the same call again completes it
            } catch (ProducerFencedException e) {
                throw e;
            } catch (KafkaException e) {
                KeelTransactions.check(commit, what + ": abort failed: " + e);
                System.out.println(what + ": commit failed: " + e + "; aborting it");
                commit = false;
            }
        }
    }
}
