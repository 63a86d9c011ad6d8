//! The node's log levels, changeable while it runs (Kafka's
//! `broker-loggers`: DescribeConfigs / IncrementalAlterConfigs on resource
//! type BROKER_LOGGER). The levels are a `tracing` filter (`RUST_LOG`
//! syntax: a default level and `target=level` directives); the filter
//! sits in a reload layer installed at start ([`install`]), and a change
//! rebuilds it from the directives kept here. Kafka's logger names are
//! `tracing` targets (module paths such as `helix_server::kafka`) written
//! with dots, as Java's are and as Kafka's ConfigCommand accepts them
//! (`helix_server.kafka`); its `root` logger is the default level.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::{EnvFilter, Registry, reload};

/// Kafka's name of the default level.
pub const ROOT: &str = "root";

/// The directives in force: the default level and per-target levels.
#[derive(Debug, Clone)]
struct Levels {
    root: String,
    targets: BTreeMap<String, String>,
}

impl Levels {
    fn parse(spec: &str) -> Levels {
        let mut levels = Levels {
            root: "info".into(),
            targets: BTreeMap::new(),
        };
        for d in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            match d.rsplit_once('=') {
                Some((target, level)) => {
                    levels.targets.insert(target.to_string(), level.to_string());
                }
                None => levels.root = d.to_string(),
            }
        }
        levels
    }

    /// The level `target` logs at: that of the longest directive it falls
    /// under, else the root's.
    fn effective(&self, target: &str) -> &str {
        self.targets
            .iter()
            .filter(|(t, _)| target == t.as_str() || target.starts_with(&format!("{t}::")))
            .max_by_key(|(t, _)| t.len())
            .map_or(&self.root, |(_, l)| l)
    }

    fn spec(&self) -> String {
        std::iter::once(self.root.clone())
            .chain(self.targets.iter().map(|(t, l)| format!("{t}={l}")))
            .collect::<Vec<_>>()
            .join(",")
    }
}

static HANDLE: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
static LEVELS: Mutex<Option<Levels>> = Mutex::new(None);

/// The filter layer for `spec`, whose levels [`set`] can change from then
/// on. Err: `spec` is not a valid filter.
pub fn install(spec: &str) -> Result<reload::Layer<EnvFilter, Registry>, String> {
    let filter = EnvFilter::try_new(spec).map_err(|e| e.to_string())?;
    let (layer, handle) = reload::Layer::new(filter);
    let _ = HANDLE.set(handle);
    *LEVELS.lock().unwrap_or_else(|p| p.into_inner()) = Some(Levels::parse(spec));
    Ok(layer)
}

/// The targets listed as loggers even without a level of their own (Kafka
/// lists every logger log4j has created; ConfigCommand lets an operator
/// set only those it lists): the crates and helix-server's top modules.
const KNOWN_TARGETS: &[&str] = &[
    "helix_raft",
    "helix_server",
    "helix_server::cluster",
    "helix_server::controller",
    "helix_server::group",
    "helix_server::host",
    "helix_server::kafka",
    "helix_server::replica",
    "helix_server::transport",
    "helix_server::txn",
    "helix_wal",
];

/// Every logger with its effective level in Kafka's (log4j's) names, root
/// first: the known targets and those given a level.
pub fn loggers() -> Vec<(String, String)> {
    let levels = LEVELS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_else(|| Levels::parse("info"));
    let mut targets: std::collections::BTreeSet<&str> = KNOWN_TARGETS.iter().copied().collect();
    targets.extend(levels.targets.keys().map(String::as_str));
    std::iter::once((ROOT.to_string(), log4j_level(&levels.root)))
        .chain(
            targets
                .into_iter()
                .map(|t| (t.replace("::", "."), log4j_level(levels.effective(t)))),
        )
        .collect()
}

/// One change to a logger: a log4j level, or None to fall back to the
/// root's (Kafka's DELETE).
pub type Change = (String, Option<String>);

/// Checks `changes` (Err: the message for INVALID_CONFIG) and, unless
/// `validate_only`, applies them all at once.
pub fn set(changes: &[Change], validate_only: bool) -> Result<(), String> {
    let mut guard = LEVELS.lock().unwrap_or_else(|p| p.into_inner());
    let mut levels = guard.clone().unwrap_or_else(|| Levels::parse("info"));
    for (logger, level) in changes {
        match (logger.as_str(), level) {
            (ROOT, None) => {
                return Err(format!(
                    "Removing the log level of the {ROOT} logger is not allowed"
                ));
            }
            (ROOT, Some(l)) => levels.root = tracing_level(logger, l)?.to_string(),
            (_, Some(l)) => {
                let level = tracing_level(logger, l)?;
                levels.targets.insert(target(logger)?, level.to_string());
            }
            (_, None) => {
                levels.targets.remove(&target(logger)?);
            }
        }
    }
    if validate_only {
        return Ok(());
    }
    let filter = EnvFilter::try_new(levels.spec()).map_err(|e| e.to_string())?;
    if let Some(handle) = HANDLE.get() {
        handle.reload(filter).map_err(|e| e.to_string())?;
    }
    tracing::info!(levels = %levels.spec(), "log levels changed");
    *guard = Some(levels);
    Ok(())
}

/// The `tracing` target a Kafka logger name stands for (dots for `::`).
fn target(logger: &str) -> Result<String, String> {
    let ok = !logger.is_empty()
        && logger
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == ':');
    if !ok {
        return Err(format!("Logger {logger} does not exist!"));
    }
    Ok(logger.replace('.', "::"))
}

/// Kafka's (log4j's) level names.
const LOG4J_LEVELS: &str = "ALL, TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF";

fn tracing_level(logger: &str, log4j: &str) -> Result<&'static str, String> {
    Ok(match log4j {
        "ALL" | "TRACE" => "trace",
        "DEBUG" => "debug",
        "INFO" => "info",
        "WARN" => "warn",
        "ERROR" | "FATAL" => "error",
        "OFF" => "off",
        other => {
            return Err(format!(
                "Cannot set the log level of {logger} to {other} as it is not a supported log \
                 level. Valid log4j levels are {LOG4J_LEVELS}"
            ));
        }
    })
}

fn log4j_level(tracing: &str) -> String {
    tracing.to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_reads_as_a_root_level_and_target_levels() {
        let l = Levels::parse("warn,helix_server::kafka=debug");
        assert_eq!(l.root, "warn");
        assert_eq!(l.targets["helix_server::kafka"], "debug");
        assert_eq!(l.spec(), "warn,helix_server::kafka=debug");
        assert_eq!(l.effective("helix_server::kafka::fetch"), "debug");
        assert_eq!(l.effective("helix_server::kafkaesque"), "warn");
    }

    #[test]
    fn only_log4j_levels_are_accepted() {
        assert_eq!(tracing_level("root", "FATAL"), Ok("error"));
        assert!(tracing_level("root", "VERBOSE").is_err());
        assert!(set(&[(ROOT.into(), None)], true).is_err());
        assert_eq!(
            target("helix_server.kafka"),
            Ok("helix_server::kafka".into())
        );
        assert!(target("a=b,c").is_err());
    }
}
