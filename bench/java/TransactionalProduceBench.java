import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.UUID;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java client's side of bench/compare's transactional-produce row (issue 23), the same work
 * as bench/transactions.py's librdkafka driver: one transactional producer (acks=all,
 * idempotent, linger.ms 5) commits TRANSACTIONS transactions of RECORDS records of VALUE_BYTES
 * bytes spread round-robin over PARTITIONS partitions of TOPIC (which must exist); the commit
 * latency of a transaction runs from beginTransaction to commitTransaction returning (the
 * records flushed first, as the client's commit does).
 *
 * Usage: TransactionalProduceBench BOOTSTRAP TOPIC PARTITIONS TRANSACTIONS RECORDS VALUE_BYTES
 * Prints one line: txn_per_s records_per_s p50_ms p99_ms.
 */
public final class TransactionalProduceBench {
    public static void main(String[] args) {
        if (args.length != 6) {
            System.err.println("usage: TransactionalProduceBench BOOTSTRAP TOPIC PARTITIONS "
                    + "TRANSACTIONS RECORDS VALUE_BYTES");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = positive(args[2], "PARTITIONS");
        int transactions = positive(args[3], "TRANSACTIONS");
        int records = positive(args[4], "RECORDS");
        int valueBytes = positive(args[5], "VALUE_BYTES");

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "txbench-java-" + UUID.randomUUID());
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        byte[] value = new byte[valueBytes];
        java.util.Arrays.fill(value, (byte) 'x');
        List<Double> latencies = new ArrayList<>(transactions);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            long started = System.nanoTime();
            for (int t = 0; t < transactions; t++) {
                long begun = System.nanoTime();
                producer.beginTransaction();
                for (int i = 0; i < records; i++) {
                    producer.send(new ProducerRecord<>(topic, i % partitions, null, value));
                }
                producer.commitTransaction();
                latencies.add((System.nanoTime() - begun) / 1e6);
            }
            double elapsed = (System.nanoTime() - started) / 1e9;
            Collections.sort(latencies);
            double p50 = median(latencies);
            double p99 = latencies.get(Math.max(0, (int) (latencies.size() * 0.99) - 1));
            System.out.printf("%.3f %.1f %.3f %.3f%n", transactions / elapsed,
                    (double) transactions * records / elapsed, p50, p99);
        }
    }

    private static int positive(String arg, String name) {
        int n;
        try {
            n = Integer.parseInt(arg);
        } catch (NumberFormatException e) {
            n = 0;
        }
        if (n <= 0 || n > 10_000_000) {
            System.err.println(name + " must be a whole number from 1 to 10000000, not " + arg);
            System.exit(2);
        }
        return n;
    }

    private static double median(List<Double> sorted) {
        int n = sorted.size();
        return n % 2 == 1 ? sorted.get(n / 2) : (sorted.get(n / 2 - 1) + sorted.get(n / 2)) / 2;
    }
}
