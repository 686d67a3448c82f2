import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.acl.AclBindingFilter;

/**
 * What the Java client sees of what Keel does not do (issue 20): Admin.describeAcls() without
 * an authorizer. Prints `ACLS <exception class>: <message>` (or `ACLS OK` if the call
 * succeeded). Usage: KeelRefusals <bootstrap>
 */
public final class KeelRefusals {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
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
