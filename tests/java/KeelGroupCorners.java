// Apache Kafka's Java client (4.x) in two corners of the group coordinator (issue 20). Prints one
// "KEY value" line per observation for tests/python/test_group_corners.py to check; exits 1 with
// "FAILED: reason" if the scenario itself cannot run.
//
// Usage:
//   KeelGroupCorners alter BOOTSTRAP TOPIC GROUP
//     Admin.alterConsumerGroupOffsets for TOPIC-0 (exists), TOPIC-99 (a partition TOPIC does not
//     have) and a topic that does not exist; prints each partition's result
//     ("RESULT tp OK" or "RESULT tp <exception class>") and the committed offsets read back.
//   KeelGroupCorners static BOOTSTRAP TOPIC GROUP
//     Two static members (group.instance.id a and b): a joins first and leads, b joins; a is
//     closed (a static member does not leave) and a new consumer with instance id a starts.
//     Prints b's generation and rebalance callbacks before and after, a's assignment and
//     generation before, and the new a's after.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class KeelGroupCorners {
    static void fail(String what) {
        System.out.println("FAILED: " + what);
        System.exit(1);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2], group = args[3];
        if (mode.equals("alter")) {
            alter(bootstrap, topic, group);
        } else if (mode.equals("static")) {
            staticLeader(bootstrap, topic, group);
        } else {
            fail("unknown mode " + mode);
        }
        System.exit(0);
    }

    static void alter(String bootstrap, String topic, String group) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        TopicPartition known = new TopicPartition(topic, 0);
        TopicPartition noPartition = new TopicPartition(topic, 99);
        TopicPartition noTopic = new TopicPartition(topic + "-missing", 0);
        try (Admin admin = Admin.create(props)) {
            Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
            offsets.put(known, new OffsetAndMetadata(5));
            offsets.put(noPartition, new OffsetAndMetadata(1));
            offsets.put(noTopic, new OffsetAndMetadata(1));
            AlterConsumerGroupOffsetsResult result = admin.alterConsumerGroupOffsets(group, offsets);
            for (TopicPartition tp : offsets.keySet()) {
                String outcome;
                try {
                    result.partitionResult(tp).get();
                    outcome = "OK";
                } catch (java.util.concurrent.ExecutionException e) {
                    outcome = e.getCause().getClass().getSimpleName();
                }
                System.out.println("RESULT " + tp + " " + outcome);
            }
            Map<TopicPartition, OffsetAndMetadata> read =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Map<String, String> sorted = new TreeMap<>();
            read.forEach((tp, om) -> sorted.put(tp.toString(), om == null ? "none" : "" + om.offset()));
            sorted.forEach((tp, offset) -> System.out.println("COMMITTED " + tp + " " + offset));
        }
    }

    /** One static member polling on its own thread. */
    static final class Member implements ConsumerRebalanceListener {
        final KafkaConsumer<String, String> consumer;
        final AtomicInteger callbacks = new AtomicInteger();
        final AtomicReference<Set<TopicPartition>> assignment = new AtomicReference<>(Set.of());
        final AtomicInteger generation = new AtomicInteger(-1);
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicReference<Throwable> crash = new AtomicReference<>();
        final Thread thread;

        Member(String bootstrap, String topic, String group, String instance) {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("group.id", group);
            props.put("group.instance.id", instance);
            props.put("client.id", "static-" + instance);
            props.put("enable.auto.commit", "false");
            props.put("auto.offset.reset", "earliest");
            props.put("session.timeout.ms", "30000");
            props.put("key.deserializer", StringDeserializer.class.getName());
            props.put("value.deserializer", StringDeserializer.class.getName());
            consumer = new KafkaConsumer<>(props);
            consumer.subscribe(List.of(topic), this);
            thread = new Thread(this::run, "member-" + instance);
            thread.start();
        }

        void run() {
            try {
                while (!stop.get()) {
                    consumer.poll(Duration.ofMillis(100));
                    Set<TopicPartition> now = new TreeSet<>(Comparator.comparing(TopicPartition::toString));
                    now.addAll(consumer.assignment());
                    assignment.set(now);
                    generation.set(consumer.groupMetadata().generationId());
                }
            } catch (Throwable t) {
                crash.set(t);
            } finally {
                // A static member does not send LeaveGroup: it stays in the group until its
                // session times out (KIP-345).
                consumer.close();
            }
        }

        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            callbacks.incrementAndGet();
        }

        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            callbacks.incrementAndGet();
        }

        void close() throws InterruptedException {
            stop.set(true);
            thread.join(30_000);
        }
    }

    static void waitFor(String what, java.util.function.BooleanSupplier done, Member... members)
            throws InterruptedException {
        long deadline = System.currentTimeMillis() + 60_000;
        while (!done.getAsBoolean()) {
            for (Member m : members) {
                if (m.crash.get() != null) fail(what + ": " + m.crash.get());
            }
            if (System.currentTimeMillis() > deadline) fail(what + ": not after 60 s");
            Thread.sleep(100);
        }
    }

    static void staticLeader(String bootstrap, String topic, String group) throws Exception {
        Member a = new Member(bootstrap, topic, group, "a");
        waitFor("a owns every partition", () -> a.assignment.get().size() == 4, a);
        Member b = new Member(bootstrap, topic, group, "b");
        waitFor("a and b share the partitions", () -> {
            Set<TopicPartition> sa = a.assignment.get(), sb = b.assignment.get();
            return !sa.isEmpty() && !sb.isEmpty() && sa.size() + sb.size() == 4
                    && a.generation.get() == b.generation.get();
        }, a, b);
        Thread.sleep(1_000);
        int bGeneration = b.generation.get(), bCallbacks = b.callbacks.get();
        Set<TopicPartition> aAssignment = a.assignment.get(), bAssignment = b.assignment.get();
        int aGeneration = a.generation.get();
        System.out.println("A_BEFORE " + aAssignment + " " + aGeneration);
        System.out.println("B_BEFORE " + bAssignment + " " + bGeneration + " " + bCallbacks);
        a.close();
        Member again = new Member(bootstrap, topic, group, "a");
        waitFor("the returning a is assigned", () -> !again.assignment.get().isEmpty(), again, b);
        // Long enough for b to hear of a rebalance from its heartbeats (every 3 s by default).
        Thread.sleep(7_000);
        System.out.println("A_AFTER " + again.assignment.get() + " " + again.generation.get());
        System.out.println("B_AFTER " + b.assignment.get() + " " + b.generation.get() + " "
                + b.callbacks.get());
        again.close();
        b.close();
    }
}
