// Apache Kafka's Java producer with its default settings (acks=all, enable.idempotence=true,
// retries without limit within delivery.timeout.ms) writing numbered records to a topic at a
// steady rate, so a test can kill a partition leader while it runs. Record n goes to partition
// n % partitions with value "n". Prints "acked N" every 250 acknowledgements and, at the end,
// "DONE sent=N failed=F" (F records whose send failed, with the first error on stderr).
//
// Usage: KeelIdempotentProducer BOOTSTRAP TOPIC RECORDS PARTITIONS RATE_PER_SECOND

import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class KeelIdempotentProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int records = Integer.parseInt(args[2]);
        int partitions = Integer.parseInt(args[3]);
        int rate = Integer.parseInt(args[4]);

        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        // Nothing else: the producer's defaults are what this checks.
        AtomicInteger acked = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        long started = System.nanoTime();
        try (Producer<String, String> producer =
                     new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int n = 0; n < records; n++) {
                long due = started + (long) n * 1_000_000_000L / rate;
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
                producer.send(new ProducerRecord<>(topic, n % partitions, null, Integer.toString(n)),
                        (metadata, error) -> {
                            if (error != null) {
                                if (failed.incrementAndGet() == 1) {
                                    System.err.println("first failure: " + error);
                                }
                            } else if (acked.incrementAndGet() % 250 == 0) {
                                System.out.println("acked " + acked.get());
                                System.out.flush();
                            }
                        });
            }
            producer.flush();
        }
        System.out.println("DONE sent=" + records + " acked=" + acked.get() + " failed=" + failed.get());
    }
}
