import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * What the Java client sees of what Keel does not do yet (issue 20): a transactional producer's
 * initTransactions() and Admin.describeAcls(). Prints one line per check:
 * `TXN <millis> <exception class>: <message>` and `ACLS <exception class>: <message>` (or
 * `... OK` if the call succeeded). Usage: KeelRefusals <bootstrap>
 */
public final class KeelRefusals {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "keel-refusals");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        long start = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            try {
                producer.initTransactions();
                System.out.println("TXN " + (System.nanoTime() - start) / 1_000_000 + " OK");
            } catch (Exception e) {
                System.out.println("TXN " + (System.nanoTime() - start) / 1_000_000 + " "
                        + e.getClass().getName() + ": " + e.getMessage());
            }
        }
        Properties a = new Properties();
        a.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(a)) {
            try {
                admin.describeAcls(AclBindingFilter.ANY).values().get();
                System.out.println("ACLS OK");
            } catch (ExecutionException e) {
                System.out.println("ACLS " + e.getCause().getClass().getName() + ": " + e.getCause().getMessage());
            }
        }
        System.out.flush();
    }
}
