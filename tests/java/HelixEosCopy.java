import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Exactly-once read-process-write with the Java client (issue 32): a read_committed consumer of
 * INPUT in group GROUP and a transactional producer copy every record to OUTPUT, each poll in one
 * transaction with its offsets (sendOffsetsToTransaction with the consumer's group metadata,
 * KIP-447). A transaction that fails is aborted and the consumer rewinds to the group's committed
 * offsets; a fenced producer exits 3 (the test starts another). Prints "progress N" after every
 * commit (records copied by this process) and exits 0 once the group's committed offsets reach
 * the end of INPUT (TOTAL records).
 *
 * <p>Usage: java HelixEosCopy BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID TOTAL
 */
public final class HelixEosCopy {
  public static void main(String[] args) {
    String bootstrap = args[0];
    String input = args[1];
    String output = args[2];
    String group = args[3];
    String transactionalId = args[4];
    long total = Long.parseLong(args[5]);
    long copied = 0;
    try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, group);
        KafkaProducer<byte[], byte[]> producer = producer(bootstrap, transactionalId)) {
      producer.initTransactions();
      consumer.subscribe(List.of(input));
      long deadline = System.nanoTime() + Duration.ofSeconds(240).toNanos();
      while (System.nanoTime() < deadline) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
        if (records.isEmpty()) {
          if (committedTotal(consumer, input) >= total) {
            System.out.println("HELIX-EOS OK copied=" + copied);
            return;
          }
          continue;
        }
        try {
          producer.beginTransaction();
          Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
          for (ConsumerRecord<byte[], byte[]> r : records) {
            producer.send(new ProducerRecord<>(output, r.partition(), r.key(), r.value()));
            next.put(new TopicPartition(r.topic(), r.partition()),
                new OffsetAndMetadata(r.offset() + 1));
          }
          producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
          producer.commitTransaction();
          copied += records.count();
          System.out.println("progress " + copied);
          System.out.flush();
        } catch (ProducerFencedException | OutOfOrderSequenceException
            | FencedInstanceIdException e) {
          System.out.println("fenced: " + e);
          System.exit(3);
        } catch (KafkaException e) {
          System.out.println("aborting: " + e);
          try {
            producer.abortTransaction();
          } catch (ProducerFencedException f) {
            System.out.println("fenced: " + f);
            System.exit(3);
          }
          rewind(consumer);
        }
      }
      System.out.println("HELIX-EOS TIMEOUT copied=" + copied);
      System.exit(1);
    }
  }

  /** Seeks every assigned partition back to the group's committed offset. */
  private static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
    Set<TopicPartition> assigned = consumer.assignment();
    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
    for (TopicPartition tp : assigned) {
      OffsetAndMetadata o = committed.get(tp);
      if (o == null) {
        consumer.seekToBeginning(List.of(tp));
      } else {
        consumer.seek(tp, o.offset());
      }
    }
  }

  private static long committedTotal(KafkaConsumer<byte[], byte[]> consumer, String input) {
    Set<TopicPartition> all = new java.util.HashSet<>();
    consumer.partitionsFor(input).forEach(p -> all.add(new TopicPartition(input, p.partition())));
    long sum = 0;
    for (OffsetAndMetadata o : consumer.committed(all).values()) {
      if (o != null) {
        sum += o.offset();
      }
    }
    return sum;
  }

  private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("group.id", group);
    p.put("enable.auto.commit", "false");
    p.put("auto.offset.reset", "earliest");
    p.put("isolation.level", "read_committed");
    p.put("max.poll.records", "20");
    p.put("session.timeout.ms", "6000");
    p.put("heartbeat.interval.ms", "500");
    p.put("key.deserializer", ByteArrayDeserializer.class.getName());
    p.put("value.deserializer", ByteArrayDeserializer.class.getName());
    return new KafkaConsumer<>(p);
  }

  private static KafkaProducer<byte[], byte[]> producer(String bootstrap, String transactionalId) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("transactional.id", transactionalId);
    p.put("transaction.timeout.ms", "30000");
    p.put("delivery.timeout.ms", "60000");
    p.put("key.serializer", ByteArraySerializer.class.getName());
    p.put("value.serializer", ByteArraySerializer.class.getName());
    return new KafkaProducer<>(p);
  }
}
