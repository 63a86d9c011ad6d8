//! The few Kafka calls `helix-server status` makes, over one connection per
//! broker: framing, headers and bodies through `kafka-protocol`.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response accepted (a Metadata response of a big cluster fits).
const MAX_RESPONSE: usize = 64 << 20;

/// One broker connection.
pub struct Conn {
    stream: TcpStream,
    addr: String,
    correlation_id: i32,
    timeout: Duration,
}

impl Conn {
    pub async fn open(addr: &str, timeout: Duration) -> Result<Conn, String> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("{addr}: no connection within {timeout:?}"))?
            .map_err(|e| format!("{addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            addr: addr.to_string(),
            correlation_id: 0,
            timeout,
        })
    }

    /// Sends `request` as `key` v`version` and decodes the response.
    pub async fn call<Q: Encodable, A: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Q,
    ) -> Result<A, String> {
        let addr = self.addr.clone();
        let fail = |what: String| format!("{addr}: {key:?} v{version}: {what}");
        self.correlation_id += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation_id;
        header.client_id = Some(StrBytes::from_static_str("helix-status"));
        let mut buf = BytesMut::with_capacity(256);
        buf.put_i32(0);
        header
            .encode(&mut buf, key.request_header_version(version))
            .map_err(|e| fail(e.to_string()))?;
        request
            .encode(&mut buf, version)
            .map_err(|e| fail(e.to_string()))?;
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        let exchange = async {
            self.stream.write_all(&buf).await?;
            let len = self.stream.read_i32().await?;
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= MAX_RESPONSE)
                .ok_or_else(|| std::io::Error::other(format!("response length {len}")))?;
            let mut body = vec![0u8; len];
            self.stream.read_exact(&mut body).await?;
            Ok::<_, std::io::Error>(Bytes::from(body))
        };
        let mut body = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| fail(format!("no answer within {:?}", self.timeout)))?
            .map_err(|e| fail(e.to_string()))?;
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .map_err(|e| fail(e.to_string()))?;
        if header.correlation_id != self.correlation_id {
            return Err(fail(format!(
                "correlation id {} for {}",
                header.correlation_id, self.correlation_id
            )));
        }
        let answer = A::decode(&mut body, version).map_err(|e| fail(e.to_string()))?;
        if body.has_remaining() {
            tracing::debug!(left = body.remaining(), "response has trailing bytes");
        }
        Ok(answer)
    }
}
