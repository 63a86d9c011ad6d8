//! TLS on `SSL` and `SASL_SSL` listeners: the server configuration from
//! PEM files (Kafka's `ssl.keystore.type=PEM`; built and reloaded by
//! `crate::tls`) with `ssl.client.auth`, and the principal a client
//! certificate gives (Kafka's default `User:` + the subject in RFC 2253
//! form).

use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::CertificateDer;

use crate::config::{ClientAuth, TlsConfig};
use crate::tls::Reloading;

/// The TLS configuration of the node's `SSL` and `SASL_SSL` listeners,
/// reloaded when its files change. Errors name the file and what is wrong
/// with it; the node does not start without it.
pub fn server(tls: &TlsConfig) -> Result<Arc<Reloading<ServerConfig>>, String> {
    let keystore = tls
        .keystore_location
        .clone()
        .ok_or("ssl_keystore_location is not set")?;
    let truststore = tls.truststore_location.clone();
    if tls.client_auth != ClientAuth::None && truststore.is_none() {
        return Err("ssl_client_auth needs ssl_truststore_location".into());
    }
    let auth = tls.client_auth;
    let files = std::iter::once(keystore.clone())
        .chain(truststore.clone())
        .collect();
    Reloading::new(files, move || {
        crate::tls::server_config(&keystore, truststore.as_deref(), auth)
    })
}

/// `User:` + the subject of the client's certificate, most specific
/// attribute first (`CN=client,O=example`), as Kafka's default
/// `ssl.principal.mapping.rules`; None without a (parsable) certificate.
pub fn principal(peer_certificates: Option<&[CertificateDer<'_>]>) -> Option<String> {
    let leaf = peer_certificates?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let registry = x509_parser::objects::oid_registry();
    let mut rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let name = x509_parser::objects::oid2abbrev(attr.attr_type(), registry)
                        .map(str::to_string)
                        .unwrap_or_else(|_| attr.attr_type().to_id_string());
                    format!("{name}={}", attr.as_str().unwrap_or("?"))
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.reverse();
    Some(format!("User:{}", rdns.join(",")))
}
