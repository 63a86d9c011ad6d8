//! Listeners as Kafka names them (`listeners`, `advertised.listeners`,
//! `listener.security.protocol.map`) and the TLS and SASL settings the
//! secure ones need (ADR 0028). Parsed and checked here; the accept loop
//! binds them and the Kafka front end applies their protocol.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use serde::Deserialize;

/// What a listener speaks: Kafka's four security protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        match name.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    /// The connection is wrapped in TLS before any Kafka frame.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Only ApiVersions and SASL requests are answered until the client
    /// authenticates.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// One listener of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// Its name (`PLAINTEXT`, `CLIENT`, ...), unique on the node.
    pub name: String,
    pub protocol: SecurityProtocol,
    /// The address it binds.
    pub bind: SocketAddr,
    /// `host:port` clients connected to it are told (Metadata,
    /// FindCoordinator, DescribeCluster).
    pub advertised: String,
}

/// Kafka's `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientAuth {
    /// No client certificate is asked for.
    #[default]
    None,
    /// Asked for; a client without one is still served.
    Requested,
    /// A client without a certificate the trust store vouches for is refused.
    Required,
}

/// The TLS settings of the `SSL` and `SASL_SSL` listeners (Kafka's
/// `ssl.keystore.type=PEM` form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM file with the certificate chain (leaf first) and the private key
    /// (`ssl.keystore.location`).
    pub keystore_location: Option<PathBuf>,
    /// PEM file with the CA certificates client certificates are checked
    /// against (`ssl.truststore.location`).
    pub truststore_location: Option<PathBuf>,
    pub client_auth: ClientAuth,
    /// A TLS handshake not finished within this is closed and counted.
    pub handshake_timeout: Duration,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            keystore_location: None,
            truststore_location: None,
            client_auth: ClientAuth::None,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// Mutual TLS between the nodes of a cluster: each node shows the
/// certificate of `keystore_location` and accepts a peer only with a
/// certificate that chains to `truststore_location`'s CAs (both PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTlsConfig {
    pub keystore_location: PathBuf,
    pub truststore_location: PathBuf,
}

/// The SASL settings of the `SASL_PLAINTEXT` and `SASL_SSL` listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslConfig {
    /// Mechanism names offered (`sasl.enabled.mechanisms`).
    pub enabled_mechanisms: Vec<String>,
    /// The salted credentials (interim home until the controller keeps
    /// them, ADR 0028).
    pub users_file: Option<PathBuf>,
    /// Kafka's `connection.failed.authentication.delay.ms`.
    pub failed_authentication_delay: Duration,
    /// Kafka's `connections.max.reauth.ms` (KIP-368): an authenticated
    /// session lasts this long, then the client re-authenticates on the
    /// same connection or the connection is closed at its next request.
    /// Zero: sessions never expire.
    pub connections_max_reauth: Duration,
    /// Failed authentications an address may have within a minute before
    /// its new connections to SASL listeners are closed at accept, until
    /// the minute passes (Helix's, ADR 0028 slice 5). The default,
    /// [`DEFAULT_MAX_FAILED_AUTHENTICATIONS_PER_IP_PER_MINUTE`], is above
    /// what one client retrying a wrong password makes and far below a
    /// flood; zero: no limit, as on Kafka.
    pub max_failed_authentications_per_ip_per_minute: u32,
}

/// librdkafka given a wrong password reconnects about ten times a second
/// (600 failures a minute): one such client must not get its host's other
/// clients refused, while a flood of parallel attempts from one address is
/// cut to under 17 a second.
pub const DEFAULT_MAX_FAILED_AUTHENTICATIONS_PER_IP_PER_MINUTE: u32 = 1000;

/// The mechanisms this broker implements.
pub const SASL_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig {
            enabled_mechanisms: SASL_MECHANISMS.iter().map(|m| m.to_string()).collect(),
            users_file: None,
            failed_authentication_delay: Duration::from_millis(100),
            connections_max_reauth: Duration::ZERO,
            max_failed_authentications_per_ip_per_minute:
                DEFAULT_MAX_FAILED_AUTHENTICATIONS_PER_IP_PER_MINUTE,
        }
    }
}

/// `NAME://HOST:PORT` items of a comma-separated list, in order.
fn name_addr_list(what: &str, text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, addr) = item
            .split_once("://")
            .ok_or_else(|| format!("{what}: {item:?} is not NAME://HOST:PORT"))?;
        let name = name.to_ascii_uppercase();
        if name.is_empty() || out.iter().any(|(n, _)| *n == name) {
            return Err(format!("{what}: listener name {name:?} empty or repeated"));
        }
        out.push((name, addr.to_string()));
    }
    Ok(out)
}

/// `NAME:PROTOCOL,...`.
fn protocol_map(text: &str) -> Result<Vec<(String, SecurityProtocol)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(|item| {
            let (name, proto) = item.split_once(':').ok_or_else(|| {
                format!("listener_security_protocol_map: {item:?} is not NAME:PROTOCOL")
            })?;
            let proto = SecurityProtocol::parse(proto).ok_or_else(|| {
                format!("listener_security_protocol_map: unknown protocol {proto:?}")
            })?;
            Ok((name.to_ascii_uppercase(), proto))
        })
        .collect()
}

/// A node's `advertised.listeners`: each listener name with the host and
/// port clients of that listener are told.
pub fn advertised_addresses(text: &str) -> Result<Vec<(String, String, i32)>, String> {
    name_addr_list("advertised_listeners", text)?
        .into_iter()
        .map(|(name, addr)| {
            let (host, port) = addr
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                .filter(|(h, _)| !h.is_empty())
                .ok_or_else(|| format!("{name}: {addr:?} is not HOST:PORT"))?;
            Ok((name, host, i32::from(port)))
        })
        .collect()
}

/// `HOST:PORT` to bind; an empty host binds every interface, as in Kafka.
fn bind_addr(name: &str, addr: &str) -> Result<SocketAddr, String> {
    let addr = if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_string()
    };
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("listener {name}: cannot resolve {addr:?} to bind"))
}

/// The listeners from Kafka's three settings. `advertised` and `map` may be
/// empty; a listener named like a protocol needs no map entry.
pub fn parse_listeners(
    listeners: &str,
    advertised: Option<&str>,
    map: Option<&str>,
) -> Result<Vec<ListenerConfig>, String> {
    let bound = name_addr_list("listeners", listeners)?;
    if bound.is_empty() {
        return Err("listeners: at least one listener is needed".into());
    }
    let advertised = name_addr_list("advertised_listeners", advertised.unwrap_or(""))?;
    let map = protocol_map(map.unwrap_or(""))?;
    for (name, _) in &advertised {
        if !bound.iter().any(|(n, _)| n == name) {
            return Err(format!(
                "advertised_listeners: {name} is not one of the listeners"
            ));
        }
    }
    bound
        .into_iter()
        .map(|(name, addr)| {
            let protocol = map
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, p)| *p)
                .or_else(|| SecurityProtocol::parse(&name))
                .ok_or_else(|| {
                    format!("listener {name}: no protocol in listener_security_protocol_map")
                })?;
            let bind = bind_addr(&name, &addr)?;
            let advertised = advertised
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, a)| a.clone())
                .unwrap_or_else(|| bind.to_string());
            Ok(ListenerConfig {
                name,
                protocol,
                bind,
                advertised,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_take_protocols_from_their_names_or_the_map() {
        let l = parse_listeners(
            "PLAINTEXT://127.0.0.1:9092,CLIENT://127.0.0.1:9093",
            Some("CLIENT://broker.example:19093"),
            Some("CLIENT:SASL_SSL"),
        )
        .expect("valid");
        assert_eq!(l[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(l[0].advertised, "127.0.0.1:9092");
        assert_eq!(l[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(l[1].advertised, "broker.example:19093");
    }

    #[test]
    fn listeners_without_a_protocol_or_with_unknown_advertised_names_are_refused() {
        assert!(parse_listeners("CLIENT://127.0.0.1:9093", None, None).is_err());
        assert!(parse_listeners("SSL://127.0.0.1:9093", Some("SASL_SSL://h:1"), None).is_err());
        assert!(parse_listeners("SSL://127.0.0.1:1,SSL://127.0.0.1:2", None, None).is_err());
        assert!(parse_listeners("", None, None).is_err());
    }
}
