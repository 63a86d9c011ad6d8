//! TLS material from PEM files (Kafka's `ssl.keystore.type=PEM`), for the
//! Kafka listeners and the peer transport: rustls server and client
//! configurations, and [`Reloading`], which rebuilds one when its files
//! change, so a renewed certificate is served without a restart (ADR 0028).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::client::WebPkiServerVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::ClientAuth;

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", path.display()));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("{}: no private key: {e}", path.display()))
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server's configuration: its chain and key from `keystore` (one PEM
/// file), client certificates checked against `truststore` as `auth` says.
/// Errors name the file and what is wrong with it.
pub fn server_config(
    keystore: &Path,
    truststore: Option<&Path>,
    auth: ClientAuth,
) -> Result<ServerConfig, String> {
    let provider = provider();
    let verifier = match (auth, truststore) {
        (ClientAuth::None, _) => WebPkiClientVerifier::no_client_auth(),
        (_, None) => return Err("client authentication needs a truststore".into()),
        (auth, Some(path)) => {
            let builder =
                WebPkiClientVerifier::builder_with_provider(roots(path)?, provider.clone());
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
    ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certificates(keystore)?, key(keystore)?)
        .map_err(|e| format!("{}: {e}", keystore.display()))
}

/// A client's configuration presenting the chain and key of `keystore` and
/// trusting only the CAs of `truststore` (mutual TLS between peers).
pub fn client_config(keystore: &Path, truststore: &Path) -> Result<ClientConfig, String> {
    let provider = provider();
    let verifier =
        WebPkiServerVerifier::builder_with_provider(roots(truststore)?, provider.clone())
            .build()
            .map_err(|e| format!("server verifier: {e}"))?;
    ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(certificates(keystore)?, key(keystore)?)
        .map_err(|e| format!("{}: {e}", keystore.display()))
}

/// What identifies a version of a file: its inode (a file replaced by a
/// rename is a new one), modification time and length (None: it cannot be
/// read).
type Stamp = Option<(u64, SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.ino(), meta.modified().ok()?, meta.len()))
}

/// What [`Reloading::check`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    Reloaded,
    /// The files changed but do not make a configuration: the previous one
    /// stays in use.
    Failed(String),
}

/// How often the files behind a TLS configuration are looked at.
pub const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

type Build<T> = Box<dyn Fn() -> Result<T, String> + Send + Sync>;

/// A configuration built from files, rebuilt when [`check`](Self::check)
/// finds them changed. New connections take [`current`](Self::current);
/// connections already open keep what they started with.
pub struct Reloading<T> {
    files: Vec<PathBuf>,
    build: Build<T>,
    state: Mutex<(Arc<T>, Vec<Stamp>)>,
}

impl<T> Reloading<T> {
    /// Builds the first configuration; an error stops the node's start.
    pub fn new(
        files: Vec<PathBuf>,
        build: impl Fn() -> Result<T, String> + Send + Sync + 'static,
    ) -> Result<Arc<Reloading<T>>, String> {
        let stamps = files.iter().map(|f| stamp(f)).collect();
        let first = build()?;
        Ok(Arc::new(Reloading {
            files,
            build: Box::new(build),
            state: Mutex::new((Arc::new(first), stamps)),
        }))
    }

    pub fn current(&self) -> Arc<T> {
        self.lock().0.clone()
    }

    /// Rebuilds when a file changed since the last look. A failure is
    /// reported once per change of the files (a half-written file is
    /// retried when it is written again).
    pub fn check(&self) -> Reload {
        let stamps: Vec<Stamp> = self.files.iter().map(|f| stamp(f)).collect();
        if self.lock().1 == stamps {
            return Reload::Unchanged;
        }
        let built = (self.build)();
        let mut state = self.lock();
        state.1 = stamps;
        match built {
            Ok(config) => {
                state.0 = Arc::new(config);
                Reload::Reloaded
            }
            Err(e) => Reload::Failed(e),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Arc<T>, Vec<Stamp>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A configuration [`watch`] looks after, whatever it configures.
pub trait Watched: Send + Sync {
    fn check(&self) -> Reload;
    fn files(&self) -> &[PathBuf];
}

impl<T: Send + Sync> Watched for Reloading<T> {
    fn check(&self) -> Reload {
        Reloading::check(self)
    }

    fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

/// Checks every configuration of `watched` every `every` and logs what
/// changed, until the task is dropped.
pub async fn watch(watched: Vec<Arc<dyn Watched>>, every: std::time::Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for w in &watched {
            let files = format!("{:?}", w.files());
            match w.check() {
                Reload::Unchanged => {}
                Reload::Reloaded => tracing::info!(files, "TLS files reloaded"),
                Reload::Failed(error) => tracing::warn!(
                    files,
                    error,
                    "TLS files changed but do not load; the previous ones stay in use"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests;
