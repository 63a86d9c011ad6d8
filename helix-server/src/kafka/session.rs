//! What a connection knows about itself: the listener it came through
//! (protocol, advertised address, TLS acceptor, SASL server), who the
//! client is (TLS or SASL principal) and where its SASL exchange stands
//! (ADR 0028). The read loop owns it and hands it to dispatch request by
//! request, in order.

use std::net::IpAddr;
use std::sync::Arc;

use kafka_protocol::messages::ResponseKind;
use tokio_rustls::TlsAcceptor;

use super::sasl::credentials::Credentials;
use super::sasl::{SaslServer, SaslSession};
use crate::config::{Config, ListenerConfig, SecurityProtocol};

/// A bound listener's settings, shared by its connections.
pub struct Listener {
    pub config: ListenerConfig,
    /// Set on `SSL` and `SASL_SSL` listeners.
    pub tls: Option<TlsAcceptor>,
    /// Set on `SASL_PLAINTEXT` and `SASL_SSL` listeners.
    pub sasl: Option<Arc<SaslServer>>,
    /// The advertised address split, as Metadata carries it.
    pub host: String,
    pub port: i32,
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
            Some(super::tls::acceptor(&config.tls)?)
        } else {
            None
        };
        let sasl = match (&config.sasl.users_file, needs(SecurityProtocol::uses_sasl)) {
            (Some(path), true) => Some(Arc::new(SaslServer {
                mechanisms: config.sasl.enabled_mechanisms.clone(),
                credentials: Credentials::load(path)?,
            })),
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
                Ok(Arc::new(Listener {
                    config: l.clone(),
                    tls: tls.clone().filter(|_| l.protocol.uses_tls()),
                    sasl: sasl.clone().filter(|_| l.protocol.uses_sasl()),
                    host,
                    port: i32::from(port),
                }))
            })
            .collect()
    }

    /// Names node `me` by `listener`'s advertised address in the answers that
    /// tell clients where brokers are (Metadata, FindCoordinator,
    /// DescribeCluster): a client keeps using the listener it connected to.
    /// Other nodes keep their primary address (ADR 0028, a remaining step).
    pub fn name_node_in(&self, body: &mut ResponseKind, me: i32) {
        let listener = self;
        let host = || super::wire_str(&listener.host);
        match body {
            ResponseKind::Metadata(r) => {
                for b in r.brokers.iter_mut().filter(|b| b.node_id.0 == me) {
                    b.host = host();
                    b.port = listener.port;
                }
            }
            ResponseKind::DescribeCluster(r) => {
                for b in r.brokers.iter_mut().filter(|b| b.broker_id.0 == me) {
                    b.host = host();
                    b.port = listener.port;
                }
            }
            ResponseKind::FindCoordinator(r) => {
                if r.node_id.0 == me {
                    r.host = host();
                    r.port = listener.port;
                }
                for c in r.coordinators.iter_mut().filter(|c| c.node_id.0 == me) {
                    c.host = host();
                    c.port = listener.port;
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
        })
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
        }
    }

    /// The next frame is a bare SASL token (after SaslHandshake v0).
    pub fn expects_raw_sasl_token(&self) -> bool {
        self.sasl
            .as_ref()
            .is_some_and(SaslSession::expects_raw_token)
    }

    /// Requests other than ApiVersions and SASL may be served.
    pub fn authenticated(&self) -> bool {
        self.sasl.as_ref().is_none_or(SaslSession::authenticated)
    }
}
