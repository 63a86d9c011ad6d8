//! TLS on `SSL` and `SASL_SSL` listeners: the rustls server configuration
//! from PEM files (Kafka's `ssl.keystore.type=PEM`), `ssl.client.auth`, and
//! the principal a client certificate gives (Kafka's default
//! `User:` + the subject in RFC 2253 form).

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::{ClientAuth, TlsConfig};

fn certificates(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", path.display()));
    }
    Ok(certs)
}

/// The acceptor of the node's TLS listeners. Errors name the file and
/// what is wrong with it; the node does not start without it.
pub fn acceptor(tls: &TlsConfig) -> Result<TlsAcceptor, String> {
    let keystore = tls
        .keystore_location
        .as_deref()
        .ok_or("ssl_keystore_location is not set")?;
    let chain = certificates(keystore)?;
    let key = PrivateKeyDer::from_pem_file(keystore)
        .map_err(|e| format!("{}: no private key: {e}", keystore.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match (tls.client_auth, tls.truststore_location.as_deref()) {
        (ClientAuth::None, _) => WebPkiClientVerifier::no_client_auth(),
        (_, None) => return Err("ssl_client_auth needs ssl_truststore_location".into()),
        (auth, Some(path)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(path)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder = if auth == ClientAuth::Requested {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder
                .build()
                .map_err(|e| format!("client verifier: {e}"))?
        }
    };
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("{}: {e}", keystore.display()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
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
