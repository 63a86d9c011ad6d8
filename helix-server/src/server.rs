//! The accept loop: connection admission (`kafka::admission`), the data-directory lock, the
//! retention timer, and graceful shutdown on SIGTERM / SIGINT (stop
//! accepting, stop reading, answer in-flight requests, then exit).

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::broker::{Broker, RETENTION_INTERVAL};
use crate::config::Config;
use crate::endpoint::{self, Endpoint};
use crate::error::{HelixError, Result};
use crate::kafka::admission::Admission;
use crate::kafka::connection;
use crate::kafka::session::Listener;
use crate::metrics::metrics;

/// How long shutdown waits for this node's groups to get other leaders.
const STEP_DOWN_GRACE: Duration = Duration::from_secs(5);
/// How long shutdown waits for connections to finish their in-flight work.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// An exclusive lock on the data directory, held for the process lifetime.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    pub fn acquire(config: &Config) -> Result<DataDirLock> {
        std::fs::create_dir_all(&config.data_dir)?;
        let path = config.data_dir.join("helix.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => {
                file.set_len(0)?;
                std::io::Write::write_all(
                    &mut &file,
                    format!("{}\n", std::process::id()).as_bytes(),
                )?;
                Ok(DataDirLock { _file: file })
            }
            Err(std::fs::TryLockError::WouldBlock) => Err(HelixError::DataDirLocked(
                config.data_dir.display().to_string(),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
        }
    }
}

/// Accepted connections waiting for the main loop (each listener's accept
/// loop waits when it is full, so does the kernel's backlog).
const ACCEPT_QUEUE: usize = 64;

/// Accepts on one listener and hands each connection, tagged with its
/// listener, to the main loop (admission happens there, node-wide).
async fn accept_loop(
    socket: TcpListener,
    listener: Arc<Listener>,
    accepted: mpsc::Sender<(TcpStream, SocketAddr, Arc<Listener>)>,
) {
    loop {
        match socket.accept().await {
            Ok((stream, peer)) => {
                if accepted
                    .send((stream, peer, listener.clone()))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, listener = %listener.config.name, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Runs the broker until a shutdown signal.
pub async fn run(config: Config) -> Result<()> {
    let signal = shutdown_signal();
    let _lock = DataDirLock::acquire(&config)?;
    // The operators' endpoint first: /health answers and /ready says
    // "recovering" while the data directory is replayed.
    let endpoint = Arc::new(Endpoint::default());
    if let Some(l) = endpoint::bind(config.metrics_listen, config.metrics_listen_chosen).await? {
        tokio::spawn(endpoint::serve(l, endpoint.clone()));
    }
    // Open (and replay) everything before binding: a client that can
    // connect finds a broker that is ready and handles SIGTERM.
    let listeners = Listener::all(&config).map_err(HelixError::Config)?;
    // Every TLS listener shares one configuration, reloaded when its files
    // change.
    if let Some(tls) = listeners.iter().find_map(|l| l.tls.clone()) {
        tokio::spawn(crate::tls::watch(vec![tls], crate::tls::CHECK_EVERY));
    }
    let broker = Broker::open(config).await?;
    // SASL reads the controller's replicated credentials from here on.
    for sasl in listeners.iter().filter_map(|l| l.sasl.as_ref()) {
        sasl.credentials.attach(broker.controller.clone());
    }
    let mut bound = Vec::with_capacity(listeners.len());
    for l in listeners {
        let socket = TcpListener::bind(l.config.bind).await.map_err(|e| {
            HelixError::Config(format!(
                "cannot listen on {} (listener {}): {e}",
                l.config.bind, l.config.name
            ))
        })?;
        tracing::info!(
            listener = %l.config.name,
            protocol = l.config.protocol.name(),
            bind = %l.config.bind,
            advertised = %l.config.advertised,
            "listening"
        );
        bound.push((socket, l));
    }
    let (accepted_tx, mut accepted_rx) = mpsc::channel(ACCEPT_QUEUE);
    let accept_loops: Vec<_> = bound
        .into_iter()
        .map(|(socket, l)| tokio::spawn(accept_loop(socket, l, accepted_tx.clone())))
        .collect();
    drop(accepted_tx);
    endpoint.serving(&broker);
    tracing::info!(
        listen = %broker.config.listen,
        advertised = %broker.config.advertised,
        data_dir = %broker.config.data_dir.display(),
        node_id = broker.config.node_id,
        durability = ?broker.config.write_durability,
        "helix-server is serving Kafka"
    );
    tokio::spawn(crate::scrubber::run(
        Arc::downgrade(&broker),
        broker.config.scrub_bytes_per_second,
    ));
    let cleaned = Arc::downgrade(&broker);
    tokio::spawn(crate::compact::cleaner::run(
        broker.config.cleaner.clone(),
        broker.cleaner_stats.clone(),
        move || cleaned.upgrade().map(|b| b.topics.compaction_targets()),
    ));
    tokio::spawn(crate::heap::trim_after_bursts(broker.backpressure.clone()));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let admission = Admission::new(
        broker.config.max_connections,
        broker.config.max_connections_per_ip,
        broker.config.max_connections_per_ip_overrides.clone(),
    );
    let mut connections = JoinSet::new();
    let mut retention = tokio::time::interval(RETENTION_INTERVAL);
    tokio::pin!(signal);
    loop {
        tokio::select! {
            _ = &mut signal => break,
            _ = retention.tick() => broker.apply_retention(),
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            Some((stream, peer, listener)) = accepted_rx.recv() => {
                let ticket = match admission.admit(peer.ip()) {
                    Ok(t) => t,
                    Err(refused) => {
                        crate::metrics::Metrics::count(&metrics().counters.connections_refused, 1);
                        tracing::warn!(%peer, reason = %refused, "connection refused");
                        continue;
                    }
                };
                let b = broker.clone();
                let rx = shutdown_rx.clone();
                connections.spawn(connection::serve(b, stream, listener, rx, ticket));
            }
        }
    }
    tracing::info!(
        "shutting down: no new connections, handing leadership over, finishing in-flight requests"
    );
    for a in &accept_loops {
        a.abort();
    }
    drop(accepted_rx);
    // Leaders first move away, so clients see NOT_LEADER_OR_FOLLOWER (and
    // find the new leader) rather than a timeout on a vanished node.
    broker.host.step_down(STEP_DOWN_GRACE).await;
    let _ = shutdown_tx.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("connections still busy after the grace period; closing them");
        connections.abort_all();
    }
    broker.close_all().await;
    // Every log is closed: sync them all and say so, so the next start
    // after a host restart knows nothing reported durable was lost.
    if let Err(e) = crate::rejoin::boot::record_clean_stop(&broker.config.data_dir) {
        tracing::warn!(error = %e, "cannot record a clean stop: the next start after a host restart will rejoin as a learner");
    }
    tracing::info!("produce-path latency by stage:\n{}", metrics().summary());
    Ok(())
}

/// Installs the SIGTERM / SIGINT handlers now (so a signal that arrives
/// while the data directory is still being recovered is not fatal) and
/// returns the future that resolves on the first of them.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        match handlers {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM"),
                    _ = int.recv() => tracing::info!("SIGINT"),
                }
            }
            _ => {
                tracing::warn!("cannot install signal handlers; use ctrl-c");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_broker_cannot_lock_the_same_data_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let first = DataDirLock::acquire(&config).expect("first lock");
        assert!(matches!(
            DataDirLock::acquire(&config),
            Err(HelixError::DataDirLocked(_))
        ));
        drop(first);
        assert!(DataDirLock::acquire(&config).is_ok());
    }
}
