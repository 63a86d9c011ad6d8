import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.GroupSubscribedToTopicException;
import org.apache.kafka.common.errors.UnknownMemberIdException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * AdminClient group-offset operations (issue 13): alterConsumerGroupOffsets,
 * deleteConsumerGroupOffsets and deleteConsumerGroups are refused with Kafka's errors while a
 * consumer is active in the group (UnknownMemberIdException, GroupSubscribedToTopicException,
 * GroupNotEmptyException) and change nothing; listConsumerGroupOffsets shows the member's
 * commits; once the group is empty all four work. Expects a 2-partition TOPIC with records.
 *
 * <p>Usage: java HelixGroupAdminCheck BOOTSTRAP TOPIC GROUP
 */
public final class HelixGroupAdminCheck {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    String group = args[2];
    TopicPartition p0 = new TopicPartition(topic, 0);
    TopicPartition p1 = new TopicPartition(topic, 1);
    Properties adminProps = new Properties();
    adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    try (Admin admin = Admin.create(adminProps)) {
      try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, group)) {
        consumer.subscribe(List.of(topic));
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (consumer.assignment().size() < 2 && System.nanoTime() < deadline) {
          consumer.poll(Duration.ofMillis(100));
        }
        check(consumer.assignment().size() == 2, "assigned " + consumer.assignment());
        consumer.commitSync(Map.of(p0, new OffsetAndMetadata(3), p1, new OffsetAndMetadata(4)));
        Map<TopicPartition, OffsetAndMetadata> active = listed(admin, group);
        check(offsets(active).equals(Map.of(p0, 3L, p1, 4L)), "active group offsets " + active);

        refused(admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(0)))
            .all(), UnknownMemberIdException.class, "alterConsumerGroupOffsets");
        refused(admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all(),
            GroupSubscribedToTopicException.class, "deleteConsumerGroupOffsets");
        refused(admin.deleteConsumerGroups(List.of(group)).all(), GroupNotEmptyException.class,
            "deleteConsumerGroups");
        Map<TopicPartition, OffsetAndMetadata> after = listed(admin, group);
        check(offsets(after).equals(Map.of(p0, 3L, p1, 4L)), "refused calls changed " + after);
      }

      // The consumer left the group on close: it is Empty now.
      admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(1, "by-admin"),
          p1, new OffsetAndMetadata(2))).all().get(30, TimeUnit.SECONDS);
      Map<TopicPartition, OffsetAndMetadata> altered = listed(admin, group);
      check(offsets(altered).equals(Map.of(p0, 1L, p1, 2L)), "altered offsets " + altered);
      check("by-admin".equals(altered.get(p0).metadata()), "metadata " + altered.get(p0));

      admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all().get(30, TimeUnit.SECONDS);
      Map<TopicPartition, OffsetAndMetadata> left = listed(admin, group);
      check(offsets(left).equals(Map.of(p1, 2L)), "after deleting p0's offset " + left);

      admin.deleteConsumerGroups(List.of(group)).all().get(30, TimeUnit.SECONDS);
      Set<String> groups = admin.listConsumerGroups().all().get(30, TimeUnit.SECONDS).stream()
          .map(ConsumerGroupListing::groupId).collect(Collectors.toSet());
      check(!groups.contains(group), "deleted group still listed: " + groups);
      check(listed(admin, group).isEmpty(), "deleted group still has offsets");
    }
    System.out.println("HELIX-JAVA-GROUP-ADMIN OK");
  }

  static Map<TopicPartition, OffsetAndMetadata> listed(Admin admin, String group)
      throws Exception {
    return admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
        .get(30, TimeUnit.SECONDS);
  }

  static Map<TopicPartition, Long> offsets(Map<TopicPartition, OffsetAndMetadata> m) {
    return m.entrySet().stream().filter(e -> e.getValue() != null)
        .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
  }

  static void refused(KafkaFuture<Void> call, Class<? extends Exception> expected, String what)
      throws Exception {
    try {
      call.get(30, TimeUnit.SECONDS);
    } catch (ExecutionException e) {
      check(expected.isInstance(e.getCause()), what + " failed with " + e.getCause());
      return;
    }
    throw new AssertionError(what + " on an active group succeeded");
  }

  static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group) {
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("group.id", group);
    props.put("enable.auto.commit", "false");
    props.put("auto.offset.reset", "earliest");
    props.put("key.deserializer", ByteArrayDeserializer.class.getName());
    props.put("value.deserializer", ByteArrayDeserializer.class.getName());
    return new KafkaConsumer<>(props);
  }

  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  private HelixGroupAdminCheck() {}
}
