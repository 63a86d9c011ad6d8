import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java client's flow against a broker (issue 12): AdminClient creates a topic with configs,
 * alters and describes them and adds partitions; a KafkaProducer with its defaults (idempotent,
 * acks=all) sends records with explicit timestamps; a KafkaConsumer with assign() reads them back;
 * offsetsForTimes finds them. Exits 0 and prints "HELIX-JAVA-CHECK OK" only if every check holds.
 *
 * <p>Usage: java HelixClientCheck BOOTSTRAP TOPIC
 */
public final class HelixClientCheck {
  private static final int PARTITIONS = 4;
  private static final int RECORDS = 400;
  private static final long TIMEOUT_S = 30;

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: HelixClientCheck BOOTSTRAP TOPIC");
      System.exit(2);
    }
    String bootstrap = args[0];
    String topic = args[1];
    admin(bootstrap, topic);
    long t0 = System.currentTimeMillis() - 3_600_000L;
    produce(bootstrap, topic, t0);
    consume(bootstrap, topic, t0);
    for (String codec : List.of("gzip", "snappy", "lz4", "zstd")) {
      compressed(bootstrap, topic + "-" + codec, codec);
    }
    System.out.println("HELIX-JAVA-CHECK OK topic=" + topic + " records=" + RECORDS);
  }

  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  static void admin(String bootstrap, String topic) throws Exception {
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    try (Admin admin = Admin.create(props)) {
      NewTopic nt =
          new NewTopic(topic, 2, (short) 1)
              .configs(Map.of("retention.ms", "86400000", "max.message.bytes", "300000"));
      admin.createTopics(List.of(nt)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
      check(admin.listTopics().names().get(TIMEOUT_S, TimeUnit.SECONDS).contains(topic),
          "listTopics lacks the created topic");

      ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
      Config created = describeUntil(admin, res, c -> c.get("retention.ms") != null
          && "86400000".equals(c.get("retention.ms").value()));
      expectDynamic(created, "retention.ms", "86400000");
      expectDynamic(created, "max.message.bytes", "300000");

      admin
          .incrementalAlterConfigs(Map.of(res, List.of(
              new AlterConfigOp(new ConfigEntry("retention.ms", "172800000"), AlterConfigOp.OpType.SET),
              new AlterConfigOp(new ConfigEntry("segment.bytes", "10485760"), AlterConfigOp.OpType.SET),
              new AlterConfigOp(new ConfigEntry("max.message.bytes", ""), AlterConfigOp.OpType.DELETE))))
          .all()
          .get(TIMEOUT_S, TimeUnit.SECONDS);
      Config altered = describeUntil(admin, res, c -> "172800000".equals(c.get("retention.ms").value())
          && c.get("max.message.bytes").source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
      expectDynamic(altered, "retention.ms", "172800000");
      expectDynamic(altered, "segment.bytes", "10485760");
      ConfigEntry mmb = altered.get("max.message.bytes");
      check(mmb.source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG && !"300000".equals(mmb.value()),
          "deleted max.message.bytes still set: " + mmb);
      // Each config carries Kafka's type, as Kafka describes it.
      Map<String, ConfigEntry.ConfigType> types = Map.of(
          "cleanup.policy", ConfigEntry.ConfigType.LIST, "preallocate", ConfigEntry.ConfigType.BOOLEAN,
          "min.cleanable.dirty.ratio", ConfigEntry.ConfigType.DOUBLE, "segment.bytes", ConfigEntry.ConfigType.INT,
          "retention.ms", ConfigEntry.ConfigType.LONG, "message.timestamp.type", ConfigEntry.ConfigType.STRING);
      for (Map.Entry<String, ConfigEntry.ConfigType> t : types.entrySet()) {
        ConfigEntry e = altered.get(t.getKey());
        check(e != null && e.type() == t.getValue(), "config type of " + t.getKey() + ": " + e);
      }

      admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(PARTITIONS)))
          .all().get(TIMEOUT_S, TimeUnit.SECONDS);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
      int seen = 0;
      while (System.nanoTime() < deadline) {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
            .get(TIMEOUT_S, TimeUnit.SECONDS).get(topic);
        seen = d.partitions().size();
        if (seen == PARTITIONS && d.partitions().stream().allMatch(p -> p.leader() != null)) {
          break;
        }
        Thread.sleep(200);
      }
      check(seen == PARTITIONS, "describeTopics shows " + seen + " partitions, expected " + PARTITIONS);
    }
  }

  static Config describeUntil(Admin admin, ConfigResource res, Predicate<Config> ready) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
    Config c = null;
    while (System.nanoTime() < deadline) {
      c = admin.describeConfigs(List.of(res)).all().get(TIMEOUT_S, TimeUnit.SECONDS).get(res);
      if (ready.test(c)) {
        return c;
      }
      Thread.sleep(200);
    }
    throw new AssertionError("describeConfigs never showed the expected configs: " + c);
  }

  static void expectDynamic(Config c, String name, String value) {
    ConfigEntry e = c.get(name);
    check(e != null, "describeConfigs lacks " + name);
    check(value.equals(e.value()), name + " = " + e.value() + ", expected " + value);
    check(e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
        name + " source " + e.source() + ", expected DYNAMIC_TOPIC_CONFIG");
  }

  static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  static void produce(String bootstrap, String topic, long t0) throws Exception {
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("key.serializer", ByteArraySerializer.class.getName());
    props.put("value.serializer", ByteArraySerializer.class.getName());
    // Everything else stays at the client's defaults: enable.idempotence=true, acks=all.
    List<Future<RecordMetadata>> futures = new ArrayList<>();
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
      for (int i = 0; i < RECORDS; i++) {
        ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, i % PARTITIONS, t0 + i * 1000L,
            bytes("key-" + i), bytes("value-" + i));
        r.headers().add("seq", bytes(Integer.toString(i)));
        futures.add(producer.send(r));
      }
      producer.flush();
      for (int i = 0; i < RECORDS; i++) {
        RecordMetadata md = futures.get(i).get(TIMEOUT_S, TimeUnit.SECONDS);
        check(md.partition() == i % PARTITIONS, "record " + i + " in partition " + md.partition());
        check(md.offset() == i / PARTITIONS, "record " + i + " at offset " + md.offset());
        check(md.timestamp() == t0 + i * 1000L, "record " + i + " timestamp " + md.timestamp());
      }
    }
  }

  static void consume(String bootstrap, String topic, long t0) throws Exception {
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("key.deserializer", ByteArrayDeserializer.class.getName());
    props.put("value.deserializer", ByteArrayDeserializer.class.getName());
    props.put("enable.auto.commit", "false");
    props.put("auto.offset.reset", "none");
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
      List<TopicPartition> tps = new ArrayList<>();
      for (int p = 0; p < PARTITIONS; p++) {
        tps.add(new TopicPartition(topic, p));
      }
      consumer.assign(tps);
      consumer.seekToBeginning(tps);
      Set<Integer> seen = new HashSet<>();
      Map<Integer, Long> nextOffset = new HashMap<>();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (seen.size() < RECORDS && System.nanoTime() < deadline) {
        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
          String key = new String(r.key(), StandardCharsets.UTF_8);
          int i = Integer.parseInt(key.substring(4));
          check(seen.add(i), "record " + i + " read twice");
          check(new String(r.value(), StandardCharsets.UTF_8).equals("value-" + i), "value of " + i);
          Header h = r.headers().lastHeader("seq");
          check(h != null && new String(h.value(), StandardCharsets.UTF_8).equals(Integer.toString(i)),
              "header of " + i);
          check(r.partition() == i % PARTITIONS && r.offset() == i / PARTITIONS,
              "record " + i + " at " + r.partition() + "/" + r.offset());
          check(r.timestamp() == t0 + i * 1000L && r.timestampType() == TimestampType.CREATE_TIME,
              "record " + i + " timestamp " + r.timestamp() + " " + r.timestampType());
          long expected = nextOffset.getOrDefault(r.partition(), 0L);
          check(r.offset() == expected, "partition " + r.partition() + " offset " + r.offset()
              + " after " + (expected - 1));
          nextOffset.put(r.partition(), r.offset() + 1);
        }
      }
      check(seen.size() == RECORDS, "read " + seen.size() + " of " + RECORDS + " records");

      Map<TopicPartition, Long> begin = consumer.beginningOffsets(tps, Duration.ofSeconds(TIMEOUT_S));
      Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(TIMEOUT_S));
      for (TopicPartition tp : tps) {
        check(begin.get(tp) == 0L, "beginning offset of " + tp + " = " + begin.get(tp));
        check(end.get(tp) == RECORDS / PARTITIONS, "end offset of " + tp + " = " + end.get(tp));
      }

      // Record i sits in partition i % 4 at offset i / 4 with timestamp t0 + i s.
      Map<TopicPartition, Long> query = new HashMap<>();
      for (TopicPartition tp : tps) {
        int i = 4 * 37 + tp.partition();
        query.put(tp, t0 + i * 1000L - 500); // between record i-4 and i: finds i
      }
      Map<TopicPartition, OffsetAndTimestamp> found = consumer.offsetsForTimes(query, Duration.ofSeconds(TIMEOUT_S));
      for (TopicPartition tp : tps) {
        int i = 4 * 37 + tp.partition();
        OffsetAndTimestamp ot = found.get(tp);
        check(ot != null && ot.offset() == 37 && ot.timestamp() == t0 + i * 1000L,
            "offsetsForTimes " + tp + " = " + ot + ", expected offset 37");
      }
      Map<TopicPartition, Long> late = new HashMap<>();
      Map<TopicPartition, Long> early = new HashMap<>();
      for (TopicPartition tp : tps) {
        late.put(tp, t0 + RECORDS * 1000L + 1);
        early.put(tp, t0 - 1_000_000L);
      }
      Map<TopicPartition, OffsetAndTimestamp> none = consumer.offsetsForTimes(late, Duration.ofSeconds(TIMEOUT_S));
      Map<TopicPartition, OffsetAndTimestamp> first = consumer.offsetsForTimes(early, Duration.ofSeconds(TIMEOUT_S));
      for (TopicPartition tp : tps) {
        check(none.get(tp) == null, "offsetsForTimes past the end of " + tp + " = " + none.get(tp));
        check(first.get(tp) != null && first.get(tp).offset() == 0,
            "offsetsForTimes before the start of " + tp + " = " + first.get(tp));
      }
    }
  }

  /**
   * A one-partition topic written by a producer with compression.type=CODEC (snappy in the
   * Java client's xerial framing) and read back whole.
   */
  static void compressed(String bootstrap, String topic, String codec) throws Exception {
    Properties admin = new Properties();
    admin.put("bootstrap.servers", bootstrap);
    try (Admin a = Admin.create(admin)) {
      a.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(TIMEOUT_S, TimeUnit.SECONDS);
    }
    int n = 200;
    Properties pp = new Properties();
    pp.put("bootstrap.servers", bootstrap);
    pp.put("key.serializer", ByteArraySerializer.class.getName());
    pp.put("value.serializer", ByteArraySerializer.class.getName());
    pp.put("compression.type", codec);
    pp.put("linger.ms", "20");
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
      List<Future<RecordMetadata>> futures = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        futures.add(producer.send(new ProducerRecord<>(topic, 0, bytes("k" + i),
            bytes(codec + "-compressible-value-compressible-value-" + i))));
      }
      producer.flush();
      for (int i = 0; i < n; i++) {
        check(futures.get(i).get(TIMEOUT_S, TimeUnit.SECONDS).offset() == i, codec + " record " + i + " offset");
      }
    }
    Properties cp = new Properties();
    cp.put("bootstrap.servers", bootstrap);
    cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
    cp.put("value.deserializer", ByteArrayDeserializer.class.getName());
    cp.put("enable.auto.commit", "false");
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
      TopicPartition tp = new TopicPartition(topic, 0);
      consumer.assign(List.of(tp));
      consumer.seekToBeginning(List.of(tp));
      int next = 0;
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (next < n && System.nanoTime() < deadline) {
        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
          check(r.offset() == next, codec + ": offset " + r.offset() + ", expected " + next);
          check(new String(r.value(), StandardCharsets.UTF_8)
              .equals(codec + "-compressible-value-compressible-value-" + next), codec + " value " + next);
          next++;
        }
      }
      check(next == n, codec + ": read " + next + " of " + n);
    }
    System.out.println("compressed " + codec + " " + topic + " ok");
  }

  private HelixClientCheck() {}
}
