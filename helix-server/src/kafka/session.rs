//! What a connection knows about itself: the listener it came through
//! (protocol, advertised address, TLS acceptor, SASL server), who the
//! client is (TLS or SASL principal) and where its SASL exchange stands
//! (ADR 0028). The read loop owns it and hands it to dispatch request by
//! request, in order.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::ResponseKind;
use rustls::ServerConfig;

use super::sasl::credentials::Credentials;
use super::sasl::failures::FailedAuthentications;
use super::sasl::{SaslServer, SaslSession};
use crate::config::listeners::advertised_addresses;
use crate::config::{Config, ListenerConfig, SecurityProtocol};
use crate::tls::Reloading;

/// A bound listener's settings, shared by its connections.
pub struct Listener {
    pub config: ListenerConfig,
    /// Set on `SSL` and `SASL_SSL` listeners (reloaded when its files change).
    pub tls: Option<Arc<Reloading<ServerConfig>>>,
    /// Set on `SASL_PLAINTEXT` and `SASL_SSL` listeners.
    pub sasl: Option<Arc<SaslServer>>,
    /// The advertised address split, as Metadata carries it.
    pub host: String,
    pub port: i32,
    /// The other nodes' addresses on a listener of this name (their
    /// `[[nodes]]` `advertised_listeners`): node id, host, port.
    pub others: Vec<(i32, String, i32)>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// Every listener of the node, with its TLS acceptor and SASL users
    /// loaded: a file that cannot be read stops the start.
    pub fn all(config: &Config) -> Result<Vec<Arc<Listener>>, String> {
        let needs =
            |f: fn(SecurityProtocol) -> bool| config.listeners.iter().any(|l| f(l.protocol));
        let tls = if needs(SecurityProtocol::uses_tls) {
            Some(super::tls::server(&config.tls)?)
        } else {
            None
        };
        let sasl = match (&config.sasl.users_file, needs(SecurityProtocol::uses_sasl)) {
            (Some(path), true) => {
                let mut server = SaslServer::new(
                    config.sasl.enabled_mechanisms.clone(),
                    Credentials::load(path)?,
                );
                server.session_lifetime = config.sasl.connections_max_reauth;
                server.failures = std::sync::Mutex::new(FailedAuthentications::new(
                    config.sasl.max_failed_authentications_per_ip_per_minute,
                ));
                Some(Arc::new(server))
            }
            _ => None,
        };
        config
            .listeners
            .iter()
            .map(|l| {
                let (host, port) = l
                    .advertised
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                    .ok_or_else(|| format!("listener {}: advertised is not HOST:PORT", l.name))?;
                let mut others = Vec::new();
                for n in config.cluster.iter().flat_map(|m| &m.nodes) {
                    let Some(text) = n.advertised_listeners.as_deref() else {
                        continue;
                    };
                    if n.id == config.node_id {
                        continue;
                    }
                    let addresses = advertised_addresses(text)
                        .map_err(|e| format!("node {}: advertised_listeners: {e}", n.id))?;
                    if let Some((_, host, port)) =
                        addresses.into_iter().find(|(name, _, _)| *name == l.name)
                    {
                        others.push((n.id, host, port));
                    }
                }
                Ok(Arc::new(Listener {
                    config: l.clone(),
                    others,
                    tls: tls.clone().filter(|_| l.protocol.uses_tls()),
                    sasl: sasl.clone().filter(|_| l.protocol.uses_sasl()),
                    host,
                    port: i32::from(port),
                }))
            })
            .collect()
    }

    /// Names the nodes by their addresses on this listener in the answers
    /// that tell clients where brokers are (Metadata, FindCoordinator,
    /// DescribeCluster), so a client keeps using the listener it connected
    /// to: node `me` by this listener's advertised address, the others by
    /// their `[[nodes]]` `advertised_listeners` entry of the same name
    /// (nodes without one keep their `kafka` address).
    pub fn name_nodes_in(&self, body: &mut ResponseKind, me: i32) {
        let address = |id: i32| {
            if id == me {
                return Some((super::wire_str(&self.host), self.port));
            }
            self.others
                .iter()
                .find(|(n, _, _)| *n == id)
                .map(|(_, host, port)| (super::wire_str(host), *port))
        };
        match body {
            ResponseKind::Metadata(r) => {
                for b in &mut r.brokers {
                    if let Some((host, port)) = address(b.node_id.0) {
                        (b.host, b.port) = (host, port);
                    }
                }
            }
            ResponseKind::DescribeCluster(r) => {
                for b in &mut r.brokers {
                    if let Some((host, port)) = address(b.broker_id.0) {
                        (b.host, b.port) = (host, port);
                    }
                }
            }
            ResponseKind::FindCoordinator(r) => {
                if let Some((host, port)) = address(r.node_id.0) {
                    (r.host, r.port) = (host, port);
                }
                for c in &mut r.coordinators {
                    if let Some((host, port)) = address(c.node_id.0) {
                        (c.host, c.port) = (host, port);
                    }
                }
            }
            _ => {}
        }
    }

    /// A plaintext listener on `advertised` (unit tests of dispatch).
    #[cfg(test)]
    pub fn plaintext(host: &str, port: i32) -> Arc<Listener> {
        Arc::new(Listener {
            config: ListenerConfig {
                name: "PLAINTEXT".into(),
                protocol: SecurityProtocol::Plaintext,
                bind: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
                advertised: format!("{host}:{port}"),
            },
            tls: None,
            sasl: None,
            host: host.into(),
            port,
            others: Vec::new(),
        })
    }
}

/// Who a request's use of quotas is counted against, and the mute of its
/// connection (KIP-219), carried by the request past the read loop.
#[derive(Debug)]
pub struct QuotaCharge {
    pub user: String,
    mute: Arc<Mutex<Option<tokio::time::Instant>>>,
}

impl QuotaCharge {
    /// Mutes the connection for `wait` from now (a later mute stays).
    pub fn mute(&self, wait: std::time::Duration) {
        let until = tokio::time::Instant::now() + wait;
        let mut m = self.mute.lock().unwrap_or_else(|p| p.into_inner());
        if m.is_none_or(|old| old < until) {
            *m = Some(until);
        }
    }
}

/// One connection's identity and authentication state.
pub struct Session {
    pub listener: Arc<Listener>,
    /// The client's address (DescribeGroups' `client_host`).
    pub peer: Option<IpAddr>,
    /// The client was told this node is a member (`dispatch::check_reachable`).
    pub told_member: bool,
    /// `User:...` from the client certificate or SASL; None: ANONYMOUS.
    /// Kept for the authorizer of a later slice and for the logs.
    pub principal: Option<String>,
    /// Set on SASL listeners until the connection closes.
    pub sasl: Option<SaslSession>,
    /// The last answer ends the connection (a failed authentication).
    pub close_after_answer: bool,
    /// A client over its quota: nothing more is read from the connection
    /// before this instant (KIP-219). Set by the request's handling, which
    /// may finish after the read loop moved on (Fetch), so it is shared.
    pub muted_until: Arc<Mutex<Option<tokio::time::Instant>>>,
}

impl Session {
    pub fn new(listener: Arc<Listener>, peer: Option<IpAddr>, principal: Option<String>) -> Self {
        let sasl = listener.sasl.clone().map(SaslSession::new);
        Session {
            listener,
            peer,
            told_member: false,
            principal,
            sasl,
            close_after_answer: false,
            muted_until: Arc::default(),
        }
    }

    /// The user quotas count this connection's requests against.
    pub fn quota_user(&self) -> &str {
        crate::quota::user_of(self.principal.as_deref())
    }

    pub fn quota_charge(&self) -> QuotaCharge {
        QuotaCharge {
            user: self.quota_user().to_string(),
            mute: self.muted_until.clone(),
        }
    }

    /// Takes the instant the connection is muted until, if later than now.
    pub fn take_mute(&self) -> Option<tokio::time::Instant> {
        let until = self
            .muted_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        (until > tokio::time::Instant::now()).then_some(until)
    }

    /// The next frame is a bare SASL token (after SaslHandshake v0).
    pub fn expects_raw_sasl_token(&self) -> bool {
        self.sasl
            .as_ref()
            .is_some_and(SaslSession::expects_raw_token)
    }

    /// The SASL session ended without a re-authentication (KIP-368).
    pub fn sasl_expired(&self, now: std::time::Instant) -> bool {
        self.sasl.as_ref().is_some_and(|s| s.expired(now))
    }

    /// Counts a failed authentication against the metric and the address.
    pub fn sasl_failed(&self) {
        if let Some(server) = &self.listener.sasl {
            server.failed(self.peer);
        }
    }

    /// Requests other than ApiVersions and SASL may be served.
    pub fn authenticated(&self) -> bool {
        self.sasl.as_ref().is_none_or(SaslSession::authenticated)
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::messages::{BrokerId, MetadataResponse};

    use super::*;

    #[test]
    fn metadata_names_every_node_by_the_clients_listener_where_known() {
        let mut listener = Listener::plaintext("secure.example", 9093);
        if let Some(l) = Arc::get_mut(&mut listener) {
            l.others = vec![(2, "two.example".into(), 19093)];
        }
        let broker = |id: i32| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(super::super::wire_str("primary"))
                .with_port(9092)
        };
        let mut body = ResponseKind::Metadata(MetadataResponse::default().with_brokers(vec![
            broker(1),
            broker(2),
            broker(3),
        ]));
        listener.name_nodes_in(&mut body, 1);
        let ResponseKind::Metadata(r) = body else {
            panic!("still Metadata")
        };
        let named: Vec<(String, i32)> = r
            .brokers
            .iter()
            .map(|b| (b.host.to_string(), b.port))
            .collect();
        assert_eq!(
            named,
            vec![
                ("secure.example".to_string(), 9093),
                ("two.example".to_string(), 19093),
                ("primary".to_string(), 9092),
            ]
        );
    }
}
