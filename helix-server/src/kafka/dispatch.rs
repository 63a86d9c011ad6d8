//! From a request frame to a response: header decoding, version checks,
//! body decoding with `kafka-protocol`, routing to the API's handler, and
//! response encoding.
//!
//! [`start`] runs in the connection's read loop, in request order: it does
//! whatever must keep that order (a produce request is queued to its
//! partitions here, so a producer's batches reach each partition in the
//! order it sent them) and returns the rest as a future that runs
//! concurrently with later requests.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, OffsetCommitResponse, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::segmented::{self, Frame};
use super::{
    api_versions, cluster, configs, fetch, list_offsets, metadata, produce, records, topics,
};
use crate::broker::Broker;
use crate::error::{HelixError, Result};

/// A response still being computed: resolves to the encoded frame, or
/// None when the request gets no response (Produce with acks=0); an error
/// closes the connection.
pub type PendingResponse = Pin<Box<dyn Future<Output = Result<Option<Frame>>> + Send>>;

/// Why a connection must be closed instead of answered.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Close(pub String);

/// Decodes the frame and starts handling it (client address unknown).
#[cfg(test)]
pub async fn start(
    broker: &Arc<Broker>,
    frame: Bytes,
) -> std::result::Result<PendingResponse, Close> {
    start_from(broker, frame, None).await
}

/// Decodes a frame received from `peer` and starts handling it; the peer's
/// address reaches the group coordinator (DescribeGroups' `client_host`).
pub async fn start_from(
    broker: &Arc<Broker>,
    mut frame: Bytes,
    peer: Option<std::net::IpAddr>,
) -> std::result::Result<PendingResponse, Close> {
    if frame.len() < 4 {
        return Err(Close("request shorter than its api key and version".into()));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let key = ApiKey::try_from(raw_key).map_err(|_| Close(format!("unknown api key {raw_key}")))?;
    if api_versions::range(key).is_none() {
        return Err(Close(format!("api {key:?} is not served")));
    }
    let header = RequestHeader::decode(&mut frame, key.request_header_version(version))
        .map_err(|e| Close(format!("bad {key:?} request header: {e}")))?;
    let correlation_id = header.correlation_id;
    if key == ApiKey::ApiVersions && !api_versions::serves(key, version) {
        // KIP-511: answer a too-new ApiVersions with our ranges in a v0 body.
        let body = ResponseKind::ApiVersions(api_versions::response(true));
        return Ok(ready(encode(ApiKey::ApiVersions, 0, correlation_id, &body)));
    }
    if !api_versions::serves(key, version) {
        return Err(Close(format!("unsupported version {version} of {key:?}")));
    }
    let request = RequestKind::decode(key, &mut frame, version)
        .map_err(|e| Close(format!("malformed {key:?} v{version} body: {e}")))?;
    if frame.has_remaining() {
        tracing::debug!(
            ?key,
            version,
            left = frame.remaining(),
            "request has trailing bytes"
        );
    }
    let b = broker.clone();
    let respond = move |body: ResponseKind| {
        crate::metrics::metrics().requests.answered(key, &body);
        encode(key, version, correlation_id, &body).map(|b| Some(Frame::whole(b)))
    };
    let pending: PendingResponse =
        match request {
            RequestKind::Produce(req) => {
                let waiting = produce::enqueue(&b, req, version).await;
                Box::pin(async move {
                    match waiting.await? {
                        Some(resp) => respond(ResponseKind::Produce(resp)),
                        None => Ok(None),
                    }
                })
            }
            RequestKind::ApiVersions(_) => Box::pin(async move {
                respond(ResponseKind::ApiVersions(api_versions::response(false)))
            }),
            RequestKind::Metadata(req) => Box::pin(async move {
                respond(ResponseKind::Metadata(
                    metadata::handle(&b, req, version).await,
                ))
            }),
            RequestKind::Fetch(req) => Box::pin(async move {
                let resp = fetch::handle(&b, req, version).await;
                crate::metrics::metrics().requests.fetch_answered(
                    std::iter::once(resp.error_code).chain(
                        resp.responses
                            .iter()
                            .flat_map(|t| &t.partitions)
                            .map(|p| p.error_code),
                    ),
                );
                segmented::encode_fetch(version, correlation_id, resp).map(Some)
            }),
            RequestKind::ListOffsets(req) => Box::pin(async move {
                respond(ResponseKind::ListOffsets(list_offsets::handle(
                    &b, req, version,
                )))
            }),
            RequestKind::CreateTopics(req) => Box::pin(async move {
                respond(ResponseKind::CreateTopics(
                    topics::create_topics(&b, req, version).await,
                ))
            }),
            RequestKind::DeleteTopics(req) => Box::pin(async move {
                respond(ResponseKind::DeleteTopics(
                    topics::delete_topics(&b, req, version).await,
                ))
            }),
            RequestKind::CreatePartitions(req) => Box::pin(async move {
                respond(ResponseKind::CreatePartitions(
                    topics::create_partitions(&b, req).await,
                ))
            }),
            RequestKind::DescribeConfigs(req) => Box::pin(async move {
                respond(ResponseKind::DescribeConfigs(configs::describe(
                    &b, req, version,
                )))
            }),
            RequestKind::AlterConfigs(req) => Box::pin(async move {
                respond(ResponseKind::AlterConfigs(configs::alter(&b, req).await))
            }),
            RequestKind::IncrementalAlterConfigs(req) => Box::pin(async move {
                respond(ResponseKind::IncrementalAlterConfigs(
                    configs::incremental_alter(&b, req).await,
                ))
            }),
            RequestKind::InitProducerId(req) => Box::pin(async move {
                respond(ResponseKind::InitProducerId(
                    produce::init_producer_id(&b, req).await,
                ))
            }),
            RequestKind::DescribeCluster(req) => Box::pin(async move {
                respond(ResponseKind::DescribeCluster(cluster::describe(
                    &b, req, version,
                )))
            }),
            RequestKind::DeleteRecords(req) => Box::pin(async move {
                respond(ResponseKind::DeleteRecords(
                    records::delete_records(&b, req).await,
                ))
            }),
            RequestKind::OffsetForLeaderEpoch(req) => Box::pin(async move {
                respond(ResponseKind::OffsetForLeaderEpoch(
                    records::offset_for_leader_epoch(&b, req),
                ))
            }),
            RequestKind::OffsetCommit(mut req) => {
                let unknown = super::offset_commit::take_unknown(&b, &mut req);
                if req.topics.is_empty() && !unknown.is_empty() {
                    let resp = OffsetCommitResponse::default().with_topics(unknown);
                    return Ok(Box::pin(async move {
                        respond(ResponseKind::OffsetCommit(resp))
                    }));
                }
                let call = crate::group::wire::classify(RequestKind::OffsetCommit(req))
                    .map_err(|other| Close(format!("no handler for {other:?}")))?;
                let client_id = header.client_id.as_deref().unwrap_or_default().to_string();
                let host = crate::group::wire::client_host(peer);
                Box::pin(async move {
                    let mut answer = b.groups.call(call, version, client_id, host).await?;
                    if let ResponseKind::OffsetCommit(r) = &mut answer {
                        r.topics.extend(unknown);
                    }
                    respond(answer)
                })
            }
            other => {
                let call = crate::group::wire::classify(other)
                    .map_err(|other| Close(format!("no handler for {other:?}")))?;
                let client_id = header.client_id.as_deref().unwrap_or_default().to_string();
                let host = crate::group::wire::client_host(peer);
                Box::pin(
                    async move { respond(b.groups.call(call, version, client_id, host).await?) },
                )
            }
        };
    Ok(pending)
}

fn ready(encoded: Result<Bytes>) -> PendingResponse {
    Box::pin(async move { encoded.map(|b| Some(Frame::whole(b))) })
}

/// Encodes a whole response frame (length, header, body) for `version`. A failure here is a
/// broker bug (a field the version lacks); the connection is closed.
pub fn encode(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<Bytes> {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(0); // the frame length, filled in below
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header
        .encode(&mut buf, key.response_header_version(version))
        .map_err(|e| HelixError::InvalidRequest(format!("encoding {key:?} header: {e}")))?;
    body.encode(&mut buf, version)
        .map_err(|e| HelixError::InvalidRequest(format!("encoding {key:?} v{version}: {e:#}")))?;
    let len = i32::try_from(buf.len() - 4)
        .map_err(|_| HelixError::InvalidRequest(format!("{key:?} response above 2 GiB")))?;
    buf[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}
