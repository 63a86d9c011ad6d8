//! Topic set-up and offsets, through librdkafka's admin client and
//! metadata calls: what any Kafka broker answers.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::profile::Topic;

const TIMEOUT: Duration = Duration::from_secs(30);

pub fn config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("log_level", "3");
    config
}

/// Creates the topic when it is missing and waits until every partition
/// has a leader. An existing topic is used as it is (its partition count
/// is returned).
pub fn ensure_topic(bootstrap: &str, topic: &Topic) -> Result<i32, String> {
    let admin: AdminClient<DefaultClientContext> = config(bootstrap)
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let new = NewTopic::new(
        &topic.name,
        topic.partitions,
        TopicReplication::Fixed(topic.replication_factor),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| e.to_string())?;
    let results = runtime
        .block_on(admin.create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        ))
        .map_err(|e| format!("CreateTopics: {e}"))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => return Err(format!("CreateTopics {name}: {code}")),
        }
    }
    let consumer = reader(bootstrap)?;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let led = consumer
            .fetch_metadata(Some(&topic.name), Duration::from_secs(5))
            .ok()
            .and_then(|m| {
                m.topics().first().map(|t| {
                    (
                        t.error(),
                        t.partitions()
                            .iter()
                            .map(|p| p.leader())
                            .collect::<Vec<_>>(),
                    )
                })
            });
        if let Some((None, leaders)) = &led
            && !leaders.is_empty()
            && leaders.iter().all(|&l| l >= 0)
        {
            return Ok(leaders.len() as i32);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "topic {} has no leader for every partition after {TIMEOUT:?}: {led:?}",
                topic.name
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A consumer without a group, for metadata, offsets and reading back.
pub fn reader(bootstrap: &str) -> Result<BaseConsumer, String> {
    config(bootstrap)
        .set("group.id", "helix-workload-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e: KafkaError| format!("consumer: {e}"))
}

/// The high watermark of every partition. Leaders may move while a topic
/// settles (balancing after creation, an election), so a failed query is
/// retried until `TIMEOUT`.
pub fn high_watermarks(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: i32,
) -> Result<Vec<i64>, String> {
    (0..partitions)
        .map(|p| {
            let deadline = Instant::now() + TIMEOUT;
            loop {
                match consumer.fetch_watermarks(topic, p, Duration::from_secs(5)) {
                    Ok((_, high)) => return Ok(high),
                    Err(e) if Instant::now() > deadline => {
                        return Err(format!("offsets of {topic}-{p}: {e}"));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            }
        })
        .collect()
}
