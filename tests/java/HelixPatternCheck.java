import java.time.Duration;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A pattern subscription never takes an internal topic unless asked to (issue 32 item 5): a
 * KafkaConsumer subscribes to a pattern that matches TOPIC and every name starting with "__"
 * (which __consumer_offsets does), with the client's default exclude.internal.topics=true, and
 * prints what it was assigned once TOPIC's partitions are in it. The client drops a topic from a
 * pattern match only when Metadata marks it internal.
 *
 * <p>Usage: java HelixPatternCheck BOOTSTRAP TOPIC GROUP [include-internal]: with the fourth
 * argument, exclude.internal.topics=false (asked to: the internal topic is assigned too).
 */
public final class HelixPatternCheck {
  public static void main(String[] args) {
    String bootstrap = args[0];
    String topic = args[1];
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("group.id", args[2]);
    props.put("key.deserializer", ByteArrayDeserializer.class.getName());
    props.put("value.deserializer", ByteArrayDeserializer.class.getName());
    props.put("metadata.max.age.ms", "1000");
    if (args.length > 3 && args[3].equals("include-internal")) {
      props.put("exclude.internal.topics", "false");
    }
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
      consumer.subscribe(Pattern.compile(Pattern.quote(topic) + "|__.*"));
      long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
      Set<String> topics = new TreeSet<>();
      while (System.nanoTime() < deadline) {
        consumer.poll(Duration.ofMillis(200));
        topics.clear();
        for (TopicPartition tp : consumer.assignment()) {
          topics.add(tp.topic());
        }
        if (topics.contains(topic)) {
          // One more metadata round, so a late internal match would show.
          long settle = System.nanoTime() + Duration.ofSeconds(2).toNanos();
          while (System.nanoTime() < settle) {
            consumer.poll(Duration.ofMillis(200));
          }
          topics.clear();
          for (TopicPartition tp : consumer.assignment()) {
            topics.add(tp.topic());
          }
          System.out.println("HELIX-JAVA-PATTERN assigned=" + String.join(",", topics));
          return;
        }
      }
      System.out.println("HELIX-JAVA-PATTERN never assigned " + topic);
      System.exit(1);
    }
  }
}
