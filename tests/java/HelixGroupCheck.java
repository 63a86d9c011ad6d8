import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Consumer groups with the Java client (issue 13): a KafkaConsumer with manual commits reads a
 * 4-partition topic alone, a second member joins and the partitions are split 2/2, offsets are
 * committed on revocation so no record is read twice, and the group's committed offsets end at
 * the log end. Expects RECORDS_PER_PARTITION records already in each partition.
 *
 * <p>Usage: java HelixGroupCheck BOOTSTRAP TOPIC GROUP RECORDS_PER_PARTITION
 */
public final class HelixGroupCheck {
  private static final int PARTITIONS = 4;

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    String group = args[2];
    int perPartition = Integer.parseInt(args[3]);
    Set<String> seen = new HashSet<>();
    try (KafkaConsumer<byte[], byte[]> first = consumer(bootstrap, group);
        KafkaConsumer<byte[], byte[]> second = consumer(bootstrap, group)) {
      first.subscribe(List.of(topic), committingListener(first));
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (seen.size() < perPartition && System.nanoTime() < deadline) {
        read(first, seen);
      }
      check(first.assignment().size() == PARTITIONS, "the only member holds " + first.assignment());
      first.commitSync();

      second.subscribe(List.of(topic), committingListener(second));
      deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (!(first.assignment().size() == 2 && second.assignment().size() == 2)
          && System.nanoTime() < deadline) {
        read(first, seen);
        read(second, seen);
      }
      check(first.assignment().size() == 2 && second.assignment().size() == 2,
          "after the join: " + first.assignment() + " / " + second.assignment());
      Set<TopicPartition> both = new HashSet<>(first.assignment());
      both.addAll(second.assignment());
      check(both.size() == PARTITIONS, "partitions lost in the rebalance: " + both);

      deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (seen.size() < PARTITIONS * perPartition && System.nanoTime() < deadline) {
        read(first, seen);
        read(second, seen);
      }
      check(seen.size() == PARTITIONS * perPartition, "read " + seen.size() + " records");
      first.commitSync();
      second.commitSync();

      Set<TopicPartition> all = new HashSet<>();
      for (int p = 0; p < PARTITIONS; p++) {
        all.add(new TopicPartition(topic, p));
      }
      Map<TopicPartition, OffsetAndMetadata> committed = first.committed(all, Duration.ofSeconds(30));
      for (TopicPartition tp : all) {
        OffsetAndMetadata om = committed.get(tp);
        check(om != null && om.offset() == perPartition, "committed " + tp + " = " + om);
      }
    }
    System.out.println("HELIX-JAVA-GROUP OK records=" + seen.size());
  }

  static void read(KafkaConsumer<byte[], byte[]> c, Set<String> seen) {
    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
      check(seen.add(r.partition() + "/" + r.offset()), "read twice: " + r.partition() + "/" + r.offset());
    }
  }

  static ConsumerRebalanceListener committingListener(KafkaConsumer<byte[], byte[]> c) {
    return new ConsumerRebalanceListener() {
      @Override
      public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : partitions) {
          offsets.put(tp, new OffsetAndMetadata(c.position(tp)));
        }
        c.commitSync(offsets);
      }

      @Override
      public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}
    };
  }

  static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group) {
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("group.id", group);
    props.put("enable.auto.commit", "false");
    props.put("auto.offset.reset", "earliest");
    props.put("max.poll.records", "20");
    props.put("key.deserializer", ByteArrayDeserializer.class.getName());
    props.put("value.deserializer", ByteArrayDeserializer.class.getName());
    return new KafkaConsumer<>(props);
  }

  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  private HelixGroupCheck() {}
}
