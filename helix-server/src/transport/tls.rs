//! Mutual TLS between the nodes (ADR 0028): each side shows its node
//! certificate and accepts the other's only if it chains to the cluster's
//! CAs. Both configurations are reloaded when their files change (new
//! connections take the new ones; open ones keep theirs).
//!
//! The server side hands tonic connections whose handshake has finished:
//! each handshake runs in its own task under [`HANDSHAKE_TIMEOUT`], so a
//! stalled or refused peer never holds up the accept loop. The client side
//! is a connector that dials TCP and runs the handshake, checking the peer's
//! certificate against its address's host name or IP.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::{ClientConfig, ServerConfig};
use rustls_pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::Service;
use tonic::codegen::http::Uri;

use crate::config::ClientAuth;
use crate::tls::{Reloading, Watched};

/// A handshake not done within this closes the connection.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshaken connections waiting for tonic.
const READY_QUEUE: usize = 16;

/// The node's two TLS configurations, as peer server and as peer client.
#[derive(Clone)]
pub struct PeerTls {
    pub server: Arc<Reloading<ServerConfig>>,
    pub client: Arc<Reloading<ClientConfig>>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls")
            .field("files", &self.server.files())
            .finish()
    }
}

impl PeerTls {
    /// Loads both from `keystore` (chain and key) and `truststore` (CAs):
    /// an error names the file, and the node does not start.
    pub fn load(keystore: &Path, truststore: &Path) -> Result<PeerTls, String> {
        let files = vec![keystore.to_path_buf(), truststore.to_path_buf()];
        let (k, t) = (keystore.to_path_buf(), truststore.to_path_buf());
        let server = Reloading::new(files.clone(), move || {
            crate::tls::server_config(&k, Some(&t), ClientAuth::Required)
        })?;
        let (k, t) = (keystore.to_path_buf(), truststore.to_path_buf());
        let client = Reloading::new(files, move || crate::tls::client_config(&k, &t))?;
        Ok(PeerTls { server, client })
    }

    /// Both, for the reload watcher.
    pub fn watched(&self) -> Vec<Arc<dyn Watched>> {
        vec![self.server.clone(), self.client.clone()]
    }
}

/// The connections of `listener` whose TLS handshake succeeded, until
/// `stop`. A failed or stalled handshake is logged and closed.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<Reloading<ServerConfig>>,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<io::Result<server::TlsStream<TcpStream>>> {
    let (ready, rx) = mpsc::channel(READY_QUEUE);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.wait_for(|s| *s) => return,
            };
            let (stream, from) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "peer accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let acceptor = TlsAcceptor::from(tls.current());
            let ready = ready.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = ready.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(%from, error = %e, "refused a peer connection: TLS handshake failed")
                    }
                    Err(_) => {
                        tracing::warn!(%from, "refused a peer connection: TLS handshake not finished in time")
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Dials a peer and runs the TLS handshake (tonic's connector).
#[derive(Clone)]
pub struct Connector {
    pub tls: Arc<Reloading<ClientConfig>>,
}

impl Service<Uri> for Connector {
    type Response = TokioIo<client::TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = TlsConnector::from(self.tls.current());
        Box::pin(async move {
            let bad =
                |what: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: {what}"));
            let host = uri.host().ok_or_else(|| bad("no host"))?;
            let port = uri.port_u16().ok_or_else(|| bad("no port"))?;
            // An IPv6 literal comes bracketed in a URI.
            let name = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let server_name =
                ServerName::try_from(name.clone()).map_err(|_| bad("not a host name"))?;
            let stream = TcpStream::connect((name.as_str(), port)).await?;
            let _ = stream.set_nodelay(true);
            let tls = connector.connect(server_name, stream).await?;
            Ok(TokioIo::new(tls))
        })
    }
}
