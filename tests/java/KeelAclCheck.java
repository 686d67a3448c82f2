import java.io.FileInputStream;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * What the Java client sees of Keel's authorization (issue 22). Usage:
 * KeelAclCheck <bootstrap> <client.properties> <action>... where an action is
 * `list` (the topics Admin.listTopics shows), `produce:<topic>` (one record, not idempotent),
 * `idempotent:<topic>` (one record, idempotent producer), `delete:<topic>` (Admin.deleteTopics)
 * or `describeAcls`. Prints one line per action: `<action> OK [detail]` or
 * `<action> <exception class>: <message>`.
 */
public final class KeelAclCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        Properties common = new Properties();
        try (FileInputStream in = new FileInputStream(args[1])) {
            common.load(in);
        }
        common.put("bootstrap.servers", bootstrap);
        for (int i = 2; i < args.length; i++) {
            String action = args[i];
            try {
                System.out.println(action + " OK " + run(action, common));
            } catch (ExecutionException e) {
                Throwable cause = e.getCause();
                System.out.println(action + " " + cause.getClass().getName() + ": " + cause.getMessage());
            } catch (Exception e) {
                System.out.println(action + " " + e.getClass().getName() + ": " + e.getMessage());
            }
        }
    }

    private static String run(String action, Properties common) throws Exception {
        String[] parts = action.split(":", 2);
        switch (parts[0]) {
            case "list":
                try (Admin admin = Admin.create(common)) {
                    Set<String> names = admin.listTopics().names().get();
                    return String.join(",", new java.util.TreeSet<>(names));
                }
            case "delete":
                try (Admin admin = Admin.create(common)) {
                    admin.deleteTopics(List.of(parts[1])).all().get();
                    return "";
                }
            case "describeAcls":
                try (Admin admin = Admin.create(common)) {
                    return String.valueOf(admin.describeAcls(AclBindingFilter.ANY).values().get().size());
                }
            case "produce":
            case "idempotent":
                Properties p = new Properties();
                p.putAll(common);
                p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, String.valueOf(parts[0].equals("idempotent")));
                p.put(ProducerConfig.ACKS_CONFIG, "all");
                p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
                p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
                p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
                p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
                p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
                try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                    return String.valueOf(producer.send(new ProducerRecord<>(parts[1], new byte[] {1})).get().offset());
                }
            default:
                throw new IllegalArgumentException("unknown action " + action);
        }
    }
}
