//! Kafka framing: every request and response is an i32 big-endian length
//! followed by that many bytes. The declared length is checked against the
//! configured maximum before any buffer is allocated for it.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{HelixError, Result};

/// Smallest valid request: api key, api version, correlation id, client id
/// length (2 + 2 + 4 + 2 bytes).
pub const MIN_REQUEST_LEN: usize = 10;

/// Reads one frame. `Ok(None)` on a clean end of stream between frames.
#[cfg(test)]
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max_len: usize) -> Result<Option<Bytes>> {
    match read_len(r, max_len).await? {
        Some(len) => read_body(r, len).await.map(Some),
        None => Ok(None),
    }
}

/// Reads a frame's declared length and checks it. `Ok(None)` on a clean
/// end of stream between frames.
pub async fn read_len<R: AsyncRead + Unpin>(r: &mut R, max_len: usize) -> Result<Option<usize>> {
    let mut len_buf = [0u8; 4];
    match r.read_exact(&mut len_buf).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let declared = i32::from_be_bytes(len_buf);
    if declared < MIN_REQUEST_LEN as i32 {
        return Err(HelixError::MalformedRequest(format!(
            "frame length {declared}"
        )));
    }
    let len = declared as usize;
    if len > max_len {
        return Err(HelixError::FrameTooLarge(i64::from(declared), max_len));
    }
    Ok(Some(len))
}

/// Reads a bare length-prefixed SASL token (after SaslHandshake v0): any
/// length from 0 to `max_len`; the end of the stream is an error.
pub async fn read_token<R: AsyncRead + Unpin>(r: &mut R, max_len: usize) -> Result<Bytes> {
    let mut len_buf = [0u8; 4];
    r.read_exact(&mut len_buf).await?;
    let declared = i32::from_be_bytes(len_buf);
    if declared < 0 || declared as usize > max_len {
        return Err(HelixError::MalformedRequest(format!(
            "SASL token length {declared}"
        )));
    }
    read_body(r, declared as usize).await
}

/// Reads the `len` bytes of a frame whose length was read.
pub async fn read_body<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> Result<Bytes> {
    // Memory follows the bytes that actually arrive: a client announcing a
    // large frame and sending it slowly (or never) holds only what it sent.
    let mut buf = Vec::with_capacity(len.min(INITIAL_FRAME_BUFFER));
    let got = r.take(len as u64).read_to_end(&mut buf).await?;
    if got < len {
        return Err(HelixError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("frame cut after {got} of {len} bytes"),
        )));
    }
    Ok(Bytes::from(buf))
}

/// First allocation for a frame (typical produce requests fit); larger
/// frames grow as their bytes arrive.
const INITIAL_FRAME_BUFFER: usize = 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_frame_round_trips() {
        let mut out = 12i32.to_be_bytes().to_vec();
        out.extend_from_slice(b"0123456789ab");
        let mut r = &out[..];
        let f = read_frame(&mut r, 1024)
            .await
            .expect("read")
            .expect("a frame");
        assert_eq!(&f[..], b"0123456789ab");
        assert!(read_frame(&mut r, 1024).await.expect("eof").is_none());
    }

    #[tokio::test]
    async fn oversized_and_negative_lengths_are_refused_before_allocating() {
        let huge = i32::MAX.to_be_bytes();
        let mut r = &huge[..];
        assert!(matches!(
            read_frame(&mut r, 1 << 20).await,
            Err(HelixError::FrameTooLarge(..))
        ));
        let neg = (-5i32).to_be_bytes();
        let mut r = &neg[..];
        assert!(matches!(
            read_frame(&mut r, 1 << 20).await,
            Err(HelixError::MalformedRequest(_))
        ));
    }

    #[tokio::test]
    async fn a_truncated_frame_is_an_error() {
        let mut data = 20i32.to_be_bytes().to_vec();
        data.extend_from_slice(&[0u8; 5]);
        let mut r = &data[..];
        assert!(read_frame(&mut r, 1024).await.is_err());
    }
}
