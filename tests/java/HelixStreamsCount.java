import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams with exactly_once_v2 (issue 32). MODE "copy": every record of INPUT to OUTPUT
 * unchanged (stateless: transactions, offsets in transactions and read_committed, no internal
 * topics). MODE "count": the records of INPUT counted per key into OUTPUT (key, count as a
 * decimal string), in a state store with a changelog (a compacted topic), no record cache, so
 * every update is emitted. Runs until SECONDS have passed; prints "state RUNNING" when the
 * application runs and "HELIX-STREAMS ERROR ..." on an uncaught exception.
 *
 * <p>Usage: java HelixStreamsCount BOOTSTRAP INPUT OUTPUT APPLICATION_ID STATE_DIR SECONDS MODE
 */
public final class HelixStreamsCount {
  public static void main(String[] args) throws Exception {
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
    p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10000);
    StreamsBuilder builder = new StreamsBuilder();
    var input = builder.stream(args[1], Consumed.with(Serdes.String(), Serdes.String()));
    if (args[6].equals("count")) {
      input.groupByKey()
          .count(Materialized.as("counts"))
          .toStream()
          .mapValues(Object::toString)
          .to(args[2], Produced.with(Serdes.String(), Serdes.String()));
    } else {
      input.to(args[2], Produced.with(Serdes.String(), Serdes.String()));
    }
    KafkaStreams streams = new KafkaStreams(builder.build(), p);
    CountDownLatch done = new CountDownLatch(1);
    streams.setUncaughtExceptionHandler(e -> {
      System.out.println("HELIX-STREAMS ERROR " + e);
      e.printStackTrace(System.out);
      done.countDown();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
          .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    streams.setStateListener((now, before) -> {
      System.out.println("state " + now);
      System.out.flush();
    });
    streams.start();
    done.await(Long.parseLong(args[5]), java.util.concurrent.TimeUnit.SECONDS);
    streams.close(Duration.ofSeconds(30));
  }
}
