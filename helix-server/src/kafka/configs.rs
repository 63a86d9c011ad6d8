//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics;
//! DescribeConfigs also shows this broker's settings (read-only) and its
//! loggers, which IncrementalAlterConfigs changes (`broker_configs.rs`).

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};

use super::broker_configs::{self, Entry};
use super::context::Administering;
use super::wire_str;
use crate::controller::topic_config::{self, ConfigSource, ConfigType};
use crate::error::HelixError;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;

/// Kafka's config_type codes used by DescribeConfigs v3+.
const TYPE_STRING: i8 = ConfigType::String as i8;
const TYPE_INT: i8 = ConfigType::Int as i8;
const TYPE_LONG: i8 = ConfigType::Long as i8;
const TYPE_LIST: i8 = ConfigType::List as i8;
const TYPE_BOOLEAN: i8 = ConfigType::Boolean as i8;
const TYPE_DOUBLE: i8 = ConfigType::Double as i8;

pub fn describe(
    node: Administering<'_>,
    req: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let mut resp = DescribeConfigsResponse::default();
    let documented = version >= 3 && req.include_documentation;
    for res in req.resources {
        let mut out = DescribeConfigsResult::default();
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name.clone();
        let entries = match res.resource_type {
            RESOURCE_TOPIC => topic_entries(node, &res.resource_name),
            RESOURCE_BROKER => broker_entries(node, &res.resource_name),
            RESOURCE_BROKER_LOGGER => {
                broker_configs::describe_loggers(node.config.node_id, &res.resource_name)
            }
            other => Err(HelixError::InvalidRequest(format!("resource type {other}"))),
        };
        match entries {
            Ok(entries) => {
                let wanted = res.configuration_keys.as_ref();
                for (name, value, source, read_only, config_type) in entries {
                    if wanted.is_some_and(|keys| !keys.iter().any(|k| k.as_str() == name)) {
                        continue;
                    }
                    let mut c = DescribeConfigsResourceResult::default();
                    c.name = wire_str(&name);
                    c.value = Some(wire_str(&value));
                    c.read_only = read_only;
                    c.config_source = source as i8;
                    if version >= 3 {
                        c.config_type = config_type;
                    }
                    if documented && res.resource_type == RESOURCE_BROKER {
                        c.documentation = broker_documentation(&name).map(wire_str);
                    }
                    out.configs.push(c);
                }
            }
            Err(e) => {
                out.error_code = e.kafka_code();
                out.error_message = Some(wire_str(&e.message()));
            }
        }
        resp.results.push(out);
    }
    resp
}

fn topic_entries(node: Administering<'_>, name: &str) -> Result<Vec<Entry>, HelixError> {
    let topic = node
        .topics
        .get(name)
        .ok_or(HelixError::UnknownTopicOrPartition)?;
    Ok(
        topic_config::describe(&topic.configs, node.config, topic.replication_factor())
            .map(|(d, value, source)| {
                (
                    d.name.to_string(),
                    value,
                    source,
                    false,
                    d.config_type as i8,
                )
            })
            .collect(),
    )
}

fn broker_entries(node: Administering<'_>, name: &str) -> Result<Vec<Entry>, HelixError> {
    let c = node.config;
    if !name.is_empty() && name != c.node_id.to_string() {
        return Err(HelixError::InvalidRequest(format!(
            "broker {name} is not this node"
        )));
    }
    let s = ConfigSource::StaticBroker;
    Ok(vec![
        ("node.id".into(), c.node_id.to_string(), s, true, TYPE_INT),
        (
            "advertised.listeners".into(),
            c.listeners
                .iter()
                .map(|l| format!("{}://{}", l.name, l.advertised))
                .collect::<Vec<_>>()
                .join(","),
            s,
            true,
            TYPE_LIST,
        ),
        (
            "log.dirs".into(),
            c.data_dir.display().to_string(),
            s,
            true,
            TYPE_STRING,
        ),
        (
            "num.partitions".into(),
            c.default_partitions.to_string(),
            s,
            true,
            TYPE_INT,
        ),
        (
            "auto.create.topics.enable".into(),
            c.auto_create_topics.to_string(),
            s,
            true,
            1,
        ),
        (
            "log.retention.ms".into(),
            c.retention_ms.to_string(),
            s,
            true,
            TYPE_LONG,
        ),
        (
            "log.retention.bytes".into(),
            c.retention_bytes.to_string(),
            s,
            true,
            TYPE_LONG,
        ),
        (
            "message.max.bytes".into(),
            c.max_message_bytes.to_string(),
            s,
            true,
            TYPE_INT,
        ),
        (
            "socket.request.max.bytes".into(),
            c.max_request_size.to_string(),
            s,
            true,
            TYPE_INT,
        ),
        (
            "log.cleaner.enable".into(),
            c.cleaner.enable.to_string(),
            s,
            true,
            TYPE_BOOLEAN,
        ),
        (
            "log.cleaner.threads".into(),
            c.cleaner.threads.to_string(),
            s,
            true,
            TYPE_INT,
        ),
        (
            "log.cleaner.dedupe.buffer.size".into(),
            c.cleaner.dedupe_buffer_size.to_string(),
            s,
            true,
            TYPE_LONG,
        ),
        (
            "log.cleaner.io.buffer.size".into(),
            c.cleaner.io_buffer_size.to_string(),
            s,
            true,
            TYPE_INT,
        ),
        (
            "log.cleaner.io.max.bytes.per.second".into(),
            format!("{:?}", c.cleaner.io_max_bytes_per_second),
            s,
            true,
            TYPE_DOUBLE,
        ),
    ])
}

/// What a broker setting means here, where that differs from Kafka's
/// documentation (DescribeConfigs v3+ with `include_documentation`).
fn broker_documentation(name: &str) -> Option<&'static str> {
    match name {
        "log.cleaner.threads" => Some(
            "Partitions cleaned at once; the dedupe buffer and the io buffer are split between them.",
        ),
        "log.cleaner.dedupe.buffer.size" => Some(
            "Bytes of key map over all cleaner threads: 24 bytes per key (a 128-bit key digest and the offset).",
        ),
        "log.cleaner.io.buffer.size" => Some(
            "Each cleaner thread gathers up to this / log.cleaner.threads / 2 bytes of cleaned batches before a write \
             to the cleaned segment (Kafka's write buffer). There is no read buffer: the cleaner reads batches in \
             place in the segments' memory mappings, one Raft entry at a time, so the other half is not used; an entry \
             larger than the write buffer is written directly.",
        ),
        "log.cleaner.io.max.bytes.per.second" => {
            Some("Bytes read and written by all cleaner threads together, per second.")
        }
        _ => None,
    }
}

/// AlterConfigs replaces a topic's whole set of overrides.
pub async fn alter(node: Administering<'_>, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut resp = AlterConfigsResponse::default();
    for res in req.resources {
        let mut configs = BTreeMap::new();
        for c in &res.configs {
            if let Some(v) = &c.value {
                configs.insert(c.name.to_string(), v.to_string());
            }
        }
        let result = match res.resource_type {
            RESOURCE_TOPIC => {
                node.admin
                    .set_topic_configs(&res.resource_name, configs, req.validate_only)
                    .await
            }
            RESOURCE_BROKER => broker_configs::alter_broker(
                node.config.node_id,
                &res.resource_name,
                &res.configs
                    .iter()
                    .map(|c| c.name.to_string())
                    .collect::<Vec<_>>(),
            ),
            RESOURCE_BROKER_LOGGER => Err(HelixError::InvalidRequest(
                "AlterConfigs is deprecated and does not support the resource type BROKER_LOGGER"
                    .into(),
            )),
            _ => Err(HelixError::InvalidRequest(
                "only topic configs can be altered".into(),
            )),
        };
        resp.responses
            .push(result_entry(res.resource_type, &res.resource_name, result));
    }
    resp
}

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// The topic configs of Kafka's LIST type, with their `LogConfig`
/// defaults: the ones APPEND and SUBTRACT apply to.
fn list_default(name: &str) -> Option<&'static str> {
    match name {
        "cleanup.policy" => Some("delete"),
        "leader.replication.throttled.replicas" | "follower.replication.throttled.replicas" => {
            Some("")
        }
        _ => None,
    }
}

/// APPEND (`append`) or SUBTRACT the comma-separated `value` to or from
/// the list config `name`, starting from its override or else its default,
/// as Kafka's `ConfigAdminManager.prepareIncrementalConfigs` does.
fn edit_list(
    configs: &mut std::collections::BTreeMap<String, String>,
    name: &str,
    value: &str,
    append: bool,
) -> Result<(), HelixError> {
    let Some(default) = list_default(name) else {
        let verb = if append { "append" } else { "subtract" };
        return Err(HelixError::InvalidConfig(format!(
            "Config value {verb} is not allowed for config key: {name}"
        )));
    };
    let old = configs.get(name).map_or(default, String::as_str);
    let mut items: Vec<&str> = old.split(',').filter(|s| !s.is_empty()).collect();
    let given = value.split(',');
    if append {
        for v in given {
            if !items.contains(&v) {
                items.push(v);
            }
        }
    } else {
        let removed: Vec<&str> = given.collect();
        items.retain(|i| !removed.contains(i));
    }
    configs.insert(name.to_string(), items.join(","));
    Ok(())
}

/// IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on top of the
/// current overrides.
pub async fn incremental_alter(
    node: Administering<'_>,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in req.resources {
        let result = async {
            match res.resource_type {
                RESOURCE_BROKER => {
                    let names: Vec<String> =
                        res.configs.iter().map(|c| c.name.to_string()).collect();
                    return broker_configs::alter_broker(
                        node.config.node_id,
                        &res.resource_name,
                        &names,
                    );
                }
                RESOURCE_BROKER_LOGGER => {
                    let changes = logger_changes(&res.configs)?;
                    return broker_configs::alter_loggers(
                        node.config.node_id,
                        &res.resource_name,
                        &changes,
                        req.validate_only,
                    );
                }
                _ => {}
            }
            if res.resource_type != RESOURCE_TOPIC {
                return Err(HelixError::InvalidRequest(
                    "only topic configs can be altered".into(),
                ));
            }
            let topic = node
                .topics
                .get(&res.resource_name)
                .ok_or(HelixError::UnknownTopicOrPartition)?;
            let mut configs = topic.configs.clone();
            for c in &res.configs {
                match (c.config_operation, &c.value) {
                    (OP_SET, Some(v)) => {
                        configs.insert(c.name.to_string(), v.to_string());
                    }
                    (OP_DELETE, _) => {
                        configs.remove(c.name.as_str());
                    }
                    (op @ (OP_APPEND | OP_SUBTRACT), Some(v)) => {
                        edit_list(&mut configs, c.name.as_str(), v.as_str(), op == OP_APPEND)?;
                    }
                    (op, _) => {
                        return Err(HelixError::InvalidConfig(format!(
                            "operation {op} on {} needs a value, or is unknown",
                            c.name.as_str()
                        )));
                    }
                }
            }
            node.admin
                .set_topic_configs(&res.resource_name, configs, req.validate_only)
                .await
        }
        .await;
        let r = result_entry(res.resource_type, &res.resource_name, result);
        let mut out = kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        out.error_code = r.error_code;
        out.error_message = r.error_message;
        out.resource_type = r.resource_type;
        out.resource_name = r.resource_name;
        resp.responses.push(out);
    }
    resp
}

/// An IncrementalAlterConfigs resource's operations on loggers: SET with a
/// level, DELETE; APPEND and SUBTRACT are refused, as Kafka does.
fn logger_changes(
    configs: &[kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
) -> Result<Vec<crate::log_levels::Change>, HelixError> {
    configs
        .iter()
        .map(|c| match (c.config_operation, &c.value) {
            (OP_SET, Some(v)) => Ok((c.name.to_string(), Some(v.to_string()))),
            (OP_DELETE, _) => Ok((c.name.to_string(), None)),
            (op, _) => Err(HelixError::InvalidConfig(format!(
                "operation {op} on logger {} is not supported (only SET and DELETE)",
                c.name.as_str()
            ))),
        })
        .collect()
}

fn result_entry(
    resource_type: i8,
    name: &kafka_protocol::protocol::StrBytes,
    result: Result<(), HelixError>,
) -> AlterConfigsResourceResponse {
    let mut r = AlterConfigsResourceResponse::default();
    r.resource_type = resource_type;
    r.resource_name = name.clone();
    if let Err(e) = result {
        r.error_code = e.kafka_code();
        r.error_message = Some(wire_str(&e.message()));
    }
    r
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;

    use super::*;

    #[test]
    fn append_and_subtract_edit_a_list_config_from_its_default_as_kafka_does() {
        let mut configs = std::collections::BTreeMap::new();
        edit_list(&mut configs, "cleanup.policy", "compact", true).expect("append");
        assert_eq!(
            configs["cleanup.policy"], "delete,compact",
            "from the default"
        );
        edit_list(&mut configs, "cleanup.policy", "compact,delete", true).expect("append");
        assert_eq!(configs["cleanup.policy"], "delete,compact", "no item twice");
        edit_list(&mut configs, "cleanup.policy", "delete", false).expect("subtract");
        assert_eq!(configs["cleanup.policy"], "compact");
        let refused = edit_list(&mut configs, "retention.ms", "1", true);
        assert!(
            matches!(&refused, Err(HelixError::InvalidConfig(m)) if m == "Config value append is not allowed for config key: retention.ms"),
            "{refused:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_broker_describes_its_cleaner_settings_with_what_they_mean_here() {
        let dir = tempfile::tempdir().unwrap();
        let b = super::super::tests::broker(dir.path()).await;
        let mut res = DescribeConfigsResource::default();
        res.resource_type = RESOURCE_BROKER;
        res.resource_name = wire_str("");
        res.configuration_keys = None;
        let mut req = DescribeConfigsRequest::default();
        req.resources = vec![res];
        req.include_documentation = true;
        let resp = describe(Administering::of(&b), req, 4);
        let configs = &resp.results[0].configs;
        let entry = |name: &str| {
            configs
                .iter()
                .find(|c| c.name.as_str() == name)
                .unwrap_or_else(|| panic!("{name} not described"))
        };
        let io = entry("log.cleaner.io.buffer.size");
        assert_eq!(io.value.as_ref().map(|v| v.as_str()), Some("524288"));
        let doc = io.documentation.as_ref().map(|d| d.to_string());
        assert!(
            doc.as_deref().is_some_and(|d| d.contains("no read buffer")),
            "{doc:?}"
        );
        assert_eq!(
            entry("log.cleaner.threads")
                .value
                .as_ref()
                .map(|v| v.as_str()),
            Some("1")
        );
        assert!(entry("node.id").documentation.is_none());
    }
}
