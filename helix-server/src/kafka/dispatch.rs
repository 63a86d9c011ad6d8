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

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, OffsetCommitRequest, OffsetCommitResponse, RequestHeader, RequestKind,
    ResponseKind, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::Decodable;

use super::authorize::{Access, Checked, Merge};
use super::context::{Administering, Partitions, Producing, Routing};
use super::sasl::Step;
use super::segmented::{self, Frame, encode};
use super::session::{Listener, Session};
use super::throttle::{self, Throttle};
use super::{
    acls, api_versions, authorize, client_quotas, configs, describe_cluster, fetch, list_offsets,
    metadata, operator, produce, producer_state, records, scram_credentials, topics,
};
use crate::broker::Broker;
use crate::error::Result;
use crate::group::service::GroupService;
use crate::group::wire::KEY_TYPE_TRANSACTION;
use crate::txn::tooling;
use crate::txn::wire as txn;

/// A response still being computed: resolves to the encoded frame, or
/// None when the request gets no response (Produce with acks=0); an error
/// closes the connection.
pub type PendingResponse = Pin<Box<dyn Future<Output = Result<Option<Frame>>> + Send>>;

/// Why a connection must be closed instead of answered.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Close(pub String);

/// The requests whose answers tell a client where to go (leaders, the
/// coordinator, the brokers, a producer id).
fn routes_clients(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::Metadata
            | ApiKey::FindCoordinator
            | ApiKey::DescribeCluster
            | ApiKey::InitProducerId
    )
}

/// Whether a request that routes clients ([`routes_clients`]) is answered
/// on this connection. `told_member`: the connection was answered one
/// while this node heard a majority (or was starting), so its client was
/// told this node is a member and may use it for everything.
///
/// A node cut off from the majority (it heard one since it started)
/// answers a connection that was never told so: it names the others and
/// no leader it cannot vouch for (ADR 0023), and a client that meets it
/// cut off moves to them without a disconnect. A connection that was told
/// is closed instead, so its client connects elsewhere at once: told that
/// a broker it relies on has left, librdkafka waits for its one-second
/// timers twice before it uses another (ADR 0023, third attempt).
fn check_reachable(
    broker: &Broker,
    key: ApiKey,
    told_member: &mut bool,
) -> std::result::Result<(), Close> {
    if !routes_clients(key) {
        return Ok(());
    }
    if !broker.cluster.cut_off() {
        *told_member = true;
        return Ok(());
    }
    if *told_member {
        return Err(Close(format!(
            "{key:?}: this node is cut off from the majority of the cluster, and this \
             connection's client was told it is a member: closed, so the client asks \
             another node"
        )));
    }
    Ok(())
}

/// Decodes the frame and starts handling it (a plaintext connection from
/// an unknown address).
#[cfg(test)]
pub async fn start(
    broker: &Arc<Broker>,
    frame: Bytes,
) -> std::result::Result<PendingResponse, Close> {
    let listener = super::session::Listener::plaintext("127.0.0.1", 9092);
    start_from(broker, frame, &mut Session::new(listener, None, None)).await
}

/// Decodes a frame received on `session`'s connection and starts handling
/// it. The steps, in order: the header and the version checks
/// ([`read_header`]), the authentication gate ([`check_authenticated`]),
/// the reachability gate ([`check_reachable`]), the body
/// ([`decode_body`]), then the SASL exchange ([`sasl_step`]), or the
/// ACLs ([`authorize::check`], when an authorizer is configured) and the
/// API's handler ([`route`]).
///
/// The time spent in this and in the returned future's polls is the
/// request's handler time ([`throttle::HandlerTime`]).
pub async fn start_from(
    broker: &Arc<Broker>,
    frame: Bytes,
    session: &mut Session,
) -> std::result::Result<PendingResponse, Close> {
    let time = Arc::new(throttle::HandlerTime::default());
    let started = Box::pin(start_timed(broker, frame, session, time.clone()));
    let pending = throttle::Timed::new(time.clone(), started, false).await?;
    Ok(Box::pin(throttle::Timed::new(time, pending, true)))
}

async fn start_timed(
    broker: &Arc<Broker>,
    frame: Bytes,
    session: &mut Session,
    time: Arc<throttle::HandlerTime>,
) -> std::result::Result<PendingResponse, Close> {
    let sasl_listener = session.sasl.is_some();
    let frame_len = frame.len();
    let (mut request, mut body) = match read_header(frame, sasl_listener)? {
        Header::Answered(pending) => return Ok(pending),
        Header::Request(request, body) => (request, body),
    };
    check_authenticated(session, request.key)?;
    check_reachable(broker, request.key, &mut session.told_member)?;
    let kind = decode_body(request.key, request.version, &mut body)?;
    if api_versions::is_sasl(request.key) {
        return sasl_step(broker, session, request, kind);
    }
    if session.listener.config.advertised != broker.config.advertised
        || !session.listener.others.is_empty()
    {
        request.listener = Some((broker.config.node_id, session.listener.clone()));
    }
    let exempt = throttle::exempt(request.key, session.authenticated());
    request.throttle = Throttle::new(
        broker.quotas.clone(),
        session.quota_charge(),
        request.client_id(),
        (!exempt).then_some(time),
    );
    let access = Access::of(broker, session.principal.as_deref(), session.peer);
    let operations = authorize::operations::answer(&kind, request.version, access.as_ref());
    let (kind, merge) = match &access {
        None => (kind, None),
        Some(a) => match authorize::check(a, request.version, kind) {
            Checked::Pass(kind, merge) => (kind, merge),
            Checked::Refused(body) => return Ok(Box::pin(async move { request.respond(body) })),
        },
    };
    request.merge = std::sync::Mutex::new(authorize::operations::chain(operations, merge));
    if request.key == ApiKey::Produce {
        request.throttle.produce_bytes(frame_len);
    }
    route(broker, request, kind, session.peer, sasl_listener, access).await
}

/// A bare SASL token after SaslHandshake v0: its reply token as a bare
/// frame. Err: authentication failed, the connection closes unanswered
/// (after the failed-authentication delay, the caller's to wait).
pub fn sasl_token(
    session: &mut Session,
    token: Bytes,
) -> std::result::Result<PendingResponse, Close> {
    let Some(sasl) = session.sasl.as_mut() else {
        return Err(Close("SASL token on a listener without SASL".into()));
    };
    match sasl.raw_token(&token, std::time::Instant::now()) {
        Ok((reply, user)) => {
            if let Some(user) = user {
                session.principal = Some(format!("User:{user}"));
            }
            let mut frame = Vec::with_capacity(4 + reply.len());
            frame.extend_from_slice(&(reply.len() as i32).to_be_bytes());
            frame.extend_from_slice(&reply);
            Ok(ready(Ok(Bytes::from(frame))))
        }
        Err(why) => {
            session.sasl_failed();
            Err(Close(format!("SASL authentication failed: {why}")))
        }
    }
}

/// Until a SASL connection is authenticated only ApiVersions and the SASL
/// requests are served; anything else closes it, as Kafka does.
fn check_authenticated(session: &Session, key: ApiKey) -> std::result::Result<(), Close> {
    if session.authenticated() || key == ApiKey::ApiVersions || api_versions::is_sasl(key) {
        return Ok(());
    }
    Err(Close(format!(
        "{key:?} before SASL authentication on listener {}",
        session.listener.config.name
    )))
}

/// SaslHandshake or SaslAuthenticate, answered in request order: the
/// session's state changes before the next frame is read. A failure is
/// answered after `connection_failed_authentication_delay_ms`, and the
/// connection closes once that answer is written.
fn sasl_step(
    broker: &Broker,
    session: &mut Session,
    r: Request,
    kind: RequestKind,
) -> std::result::Result<PendingResponse, Close> {
    let Some(sasl) = session.sasl.as_mut() else {
        return Err(Close("SASL request on a listener without SASL".into()));
    };
    let now = std::time::Instant::now();
    let (body, failed) = match kind {
        RequestKind::SaslHandshake(req) => {
            match sasl.handshake(&req, r.version, now).map_err(Close)? {
                Step::Answer(resp) => (ResponseKind::SaslHandshake(resp), false),
                Step::Fail(resp) => (ResponseKind::SaslHandshake(resp), true),
            }
        }
        RequestKind::SaslAuthenticate(req) => {
            let (step, user) = sasl.authenticate(&req, r.version, now).map_err(Close)?;
            if let Some(user) = user {
                tracing::debug!(%user, listener = %session.listener.config.name, "SASL authenticated");
                session.principal = Some(format!("User:{user}"));
            }
            match step {
                Step::Answer(resp) => (ResponseKind::SaslAuthenticate(resp), false),
                Step::Fail(resp) => (ResponseKind::SaslAuthenticate(resp), true),
            }
        }
        other => return Err(Close(format!("not a SASL request: {other:?}"))),
    };
    if !failed {
        return Ok(Box::pin(async move { r.respond(body) }));
    }
    session.sasl_failed();
    session.close_after_answer = true;
    let delay = broker.config.sasl.failed_authentication_delay;
    Ok(Box::pin(async move {
        tokio::time::sleep(delay).await;
        r.respond(body)
    }))
}

/// A request's identity once its header is read.
struct Request {
    key: ApiKey,
    version: i16,
    header: RequestHeader,
    /// This node's id and the connection's listener, when its addresses
    /// are not the nodes' primary ones: answers that name brokers name
    /// them by the listener's addresses ([`Listener::name_nodes_in`]).
    listener: Option<(i32, Arc<Listener>)>,
    /// The authorizer's error entries (or filter) for the answer
    /// ([`authorize::check`]); taken by the one `respond`.
    merge: std::sync::Mutex<Option<Merge>>,
    /// Its quota charges and their throttle (KIP-219), answered in
    /// `throttle_time_ms`; charged once the request is authenticated.
    throttle: Throttle,
}

impl Request {
    /// Encodes `body` as this request's answer, counting its error codes.
    fn respond(&self, mut body: ResponseKind) -> Result<Option<Frame>> {
        self.apply_merge(&mut body);
        if let Some((me, listener)) = &self.listener {
            listener.name_nodes_in(&mut body, *me);
        }
        self.throttle.answer(&mut body);
        crate::metrics::metrics().requests.answered(self.key, &body);
        encode(self.key, self.version, self.header.correlation_id, &body)
            .map(|b| Some(Frame::whole(b)))
    }

    /// The answer `body` will give, encoded when it is ready.
    fn answer(self, body: impl Future<Output = ResponseKind> + Send + 'static) -> PendingResponse {
        Box::pin(async move { self.respond(body.await) })
    }

    fn apply_merge(&self, body: &mut ResponseKind) {
        let merge = self.merge.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(merge) = merge {
            merge(body);
        }
    }

    fn client_id(&self) -> String {
        self.header
            .client_id
            .as_deref()
            .unwrap_or_default()
            .to_string()
    }
}

/// What the header said.
enum Header {
    /// Answered already (a too-new ApiVersions, KIP-511).
    Answered(PendingResponse),
    /// A request at a served version, and its undecoded body.
    Request(Request, Bytes),
}

/// Reads the api key, the version and the header, and checks that the API
/// is served at that version (else the connection closes, ADR 0012).
fn read_header(mut frame: Bytes, sasl_listener: bool) -> std::result::Result<Header, Close> {
    if frame.len() < 4 {
        return Err(Close("request shorter than its api key and version".into()));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let key = ApiKey::try_from(raw_key).map_err(|_| Close(format!("unknown api key {raw_key}")))?;
    if api_versions::range(key).is_none() || (api_versions::is_sasl(key) && !sasl_listener) {
        return Err(Close(format!("api {key:?} is not served")));
    }
    let header = RequestHeader::decode(&mut frame, key.request_header_version(version))
        .map_err(|e| Close(format!("bad {key:?} request header: {e}")))?;
    if key == ApiKey::ApiVersions && !api_versions::serves(key, version) {
        // KIP-511: answer a too-new ApiVersions with our ranges in a v0 body.
        let body = ResponseKind::ApiVersions(api_versions::response(true, sasl_listener));
        return Ok(Header::Answered(ready(encode(
            ApiKey::ApiVersions,
            0,
            header.correlation_id,
            &body,
        ))));
    }
    if !api_versions::serves(key, version) {
        return Err(Close(format!("unsupported version {version} of {key:?}")));
    }
    Ok(Header::Request(
        Request {
            key,
            version,
            header,
            listener: None,
            merge: std::sync::Mutex::new(None),
            throttle: Throttle::default(),
        },
        frame,
    ))
}

/// Decodes the body at `version`; trailing bytes are tolerated (logged).
fn decode_body(
    key: ApiKey,
    version: i16,
    frame: &mut Bytes,
) -> std::result::Result<RequestKind, Close> {
    let request = RequestKind::decode(key, frame, version)
        .map_err(|e| Close(format!("malformed {key:?} v{version} body: {e}")))?;
    if frame.has_remaining() {
        tracing::debug!(
            ?key,
            version,
            left = frame.remaining(),
            "request has trailing bytes"
        );
    }
    Ok(request)
}

/// The per-API table: each request to its handler. Produce is queued to
/// its partitions here, in request order; every other handler runs in the
/// returned future.
async fn route(
    broker: &Arc<Broker>,
    r: Request,
    kind: RequestKind,
    peer: Option<std::net::IpAddr>,
    sasl_listener: bool,
    access: Option<Access>,
) -> std::result::Result<PendingResponse, Close> {
    let b = broker.clone();
    let v = r.version;
    Ok(match kind {
        RequestKind::Produce(req) => {
            let waiting = produce::enqueue(Producing::of(&b), req, v).await;
            Box::pin(async move {
                match waiting.await? {
                    Some(resp) => r.respond(ResponseKind::Produce(resp)),
                    None => Ok(None),
                }
            })
        }
        RequestKind::Fetch(req) => fetch_answer(b, r, req),
        RequestKind::ApiVersions(_) => r.answer(async move {
            ResponseKind::ApiVersions(api_versions::response(false, sasl_listener))
        }),
        RequestKind::Metadata(req) => r.answer(async move {
            ResponseKind::Metadata(metadata::handle(Routing::of(&b), req, v).await)
        }),
        RequestKind::ListOffsets(req) => r.answer(async move {
            ResponseKind::ListOffsets(list_offsets::handle(Partitions::of(&b), req, v))
        }),
        RequestKind::CreateTopics(req) => r.answer(async move {
            ResponseKind::CreateTopics(topics::create_topics(Administering::of(&b), req, v).await)
        }),
        RequestKind::DeleteTopics(req) => r.answer(async move {
            ResponseKind::DeleteTopics(topics::delete_topics(Administering::of(&b), req, v).await)
        }),
        RequestKind::CreatePartitions(req) => r.answer(async move {
            ResponseKind::CreatePartitions(
                topics::create_partitions(Administering::of(&b), req).await,
            )
        }),
        RequestKind::DescribeConfigs(req) => r.answer(async move {
            ResponseKind::DescribeConfigs(configs::describe(Administering::of(&b), req, v))
        }),
        RequestKind::AlterConfigs(req) => r.answer(async move {
            ResponseKind::AlterConfigs(configs::alter(Administering::of(&b), req).await)
        }),
        RequestKind::IncrementalAlterConfigs(req) => r.answer(async move {
            ResponseKind::IncrementalAlterConfigs(
                configs::incremental_alter(Administering::of(&b), req).await,
            )
        }),
        RequestKind::InitProducerId(req) => r.answer(async move {
            ResponseKind::InitProducerId(produce::init_producer_id(Producing::of(&b), req, v).await)
        }),
        RequestKind::FindCoordinator(req) if req.key_type == KEY_TYPE_TRANSACTION => {
            r.answer(async move {
                ResponseKind::FindCoordinator(txn::find_coordinator(&b.txn, &req, v))
            })
        }
        RequestKind::AddPartitionsToTxn(req) => r.answer(async move {
            ResponseKind::AddPartitionsToTxn(
                txn::add_partitions_to_txn(&b.txn, &b.topics, req, v).await,
            )
        }),
        RequestKind::AddOffsetsToTxn(req) => r.answer(async move {
            ResponseKind::AddOffsetsToTxn(txn::add_offsets_to_txn(&b.txn, req, v).await)
        }),
        RequestKind::TxnOffsetCommit(req) => txn_offset_commit(&b, r, req, peer)?,
        RequestKind::EndTxn(req) => {
            r.answer(async move { ResponseKind::EndTxn(txn::end_txn(&b.txn, req, v).await) })
        }
        RequestKind::DescribeTransactions(req) => r.answer(async move {
            ResponseKind::DescribeTransactions(tooling::describe_transactions(&b.txn, req))
        }),
        RequestKind::ListTransactions(req) => r.answer(async move {
            ResponseKind::ListTransactions(tooling::list_transactions(&b.txn, req))
        }),
        RequestKind::DescribeProducers(req) => r.answer(async move {
            ResponseKind::DescribeProducers(
                producer_state::describe_producers(&b.topics, req).await,
            )
        }),
        RequestKind::WriteTxnMarkers(req) => r.answer(async move {
            ResponseKind::WriteTxnMarkers(producer_state::write_txn_markers(&b.topics, req).await)
        }),
        RequestKind::DescribeCluster(req) => r.answer(async move {
            ResponseKind::DescribeCluster(describe_cluster::describe(Routing::of(&b), req, v))
        }),
        RequestKind::DeleteRecords(req) => r.answer(async move {
            ResponseKind::DeleteRecords(records::delete_records(Partitions::of(&b), req).await)
        }),
        RequestKind::OffsetForLeaderEpoch(req) => r.answer(async move {
            ResponseKind::OffsetForLeaderEpoch(records::offset_for_leader_epoch(
                Partitions::of(&b),
                req,
            ))
        }),
        RequestKind::DescribeClientQuotas(req) => r.answer(async move {
            let resp = client_quotas::describe(&b.controller.view().view.quotas, &req);
            ResponseKind::DescribeClientQuotas(resp)
        }),
        RequestKind::AlterClientQuotas(req) => r.answer(async move {
            ResponseKind::AlterClientQuotas(client_quotas::alter(&b.controller, req).await)
        }),
        RequestKind::DescribeUserScramCredentials(req) => r.answer(async move {
            let resp = scram_credentials::describe(&b.controller.view().view.scram, &req);
            ResponseKind::DescribeUserScramCredentials(resp)
        }),
        RequestKind::AlterUserScramCredentials(req) => r.answer(async move {
            ResponseKind::AlterUserScramCredentials(
                scram_credentials::alter(&b.controller, req).await,
            )
        }),
        RequestKind::OffsetCommit(req) => offset_commit(&b, r, req, peer)?,
        RequestKind::DescribeAcls(req) => {
            r.answer(
                async move { ResponseKind::DescribeAcls(acls::describe(&b, access.as_ref(), req)) },
            )
        }
        RequestKind::CreateAcls(req) => r.answer(async move {
            ResponseKind::CreateAcls(acls::create(&b, access.as_ref(), req).await)
        }),
        RequestKind::DeleteAcls(req) => r.answer(async move {
            ResponseKind::DeleteAcls(acls::delete(&b, access.as_ref(), req).await)
        }),
        other => match operator::call(other) {
            Ok(call) => r.answer(async move { operator::answer(&b, call, v).await }),
            Err(other) => group_call(b.groups.clone(), r, *other, peer)?,
        },
    })
}

/// Fetch is encoded around the WAL's bytes (`segmented`), not copied into
/// a response body; its error codes are counted here.
fn fetch_answer(b: Arc<Broker>, r: Request, req: FetchRequest) -> PendingResponse {
    Box::pin(async move {
        let mut answer =
            ResponseKind::Fetch(fetch::handle(Partitions::of(&b), req, r.version).await);
        r.apply_merge(&mut answer);
        let ResponseKind::Fetch(mut resp) = answer else {
            return Err(crate::error::HelixError::CorruptState(
                "a fetch answer merged into another kind".into(),
            ));
        };
        r.throttle.fetch(&mut resp);
        crate::metrics::metrics().requests.fetch_answered(
            std::iter::once(resp.error_code).chain(
                resp.responses
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| p.error_code),
            ),
        );
        segmented::encode_fetch(r.version, r.header.correlation_id, resp).map(Some)
    })
}

/// OffsetCommit: partitions of unknown topics are answered here; the rest
/// goes to the group coordinator.
fn offset_commit(
    b: &Broker,
    r: Request,
    mut req: OffsetCommitRequest,
    peer: Option<std::net::IpAddr>,
) -> std::result::Result<PendingResponse, Close> {
    let unknown = super::offset_commit::take_unknown(&b.topics, &mut req);
    if req.topics.is_empty() && !unknown.is_empty() {
        let resp = OffsetCommitResponse::default().with_topics(unknown);
        return Ok(Box::pin(async move {
            r.respond(ResponseKind::OffsetCommit(resp))
        }));
    }
    let call = crate::group::wire::classify(RequestKind::OffsetCommit(req))
        .map_err(|other| Close(format!("no handler for {other:?}")))?;
    let client_id = r.client_id();
    let host = crate::group::wire::client_host(peer);
    let groups = b.groups.clone();
    Ok(Box::pin(async move {
        let mut answer = groups.call(call, r.version, client_id, host).await?;
        if let ResponseKind::OffsetCommit(resp) = &mut answer {
            resp.topics.extend(unknown);
        }
        r.respond(answer)
    }))
}

/// TxnOffsetCommit: partitions of unknown topics are answered here; the
/// transaction coordinator confirms the group's partition is in the
/// producer's transaction; the rest goes to the group coordinator.
fn txn_offset_commit(
    b: &Arc<Broker>,
    r: Request,
    mut req: TxnOffsetCommitRequest,
    peer: Option<std::net::IpAddr>,
) -> std::result::Result<PendingResponse, Close> {
    let unknown = super::offset_commit::take_unknown_txn(&b.topics, &mut req);
    let client_id = r.client_id();
    let host = crate::group::wire::client_host(peer);
    let b = b.clone();
    Ok(Box::pin(async move {
        if req.topics.is_empty() {
            let resp = TxnOffsetCommitResponse::default().with_topics(unknown);
            return r.respond(ResponseKind::TxnOffsetCommit(resp));
        }
        let verified = txn::verify_txn_offsets(
            &b.txn,
            &b.groups,
            &req.transactional_id.0,
            req.producer_id.0,
            req.producer_epoch,
            &req.group_id.0,
            r.version,
        )
        .await;
        if let Err(code) = verified {
            let mut topics = super::offset_commit::txn_all_failed(&req, code);
            topics.extend(unknown);
            let resp = TxnOffsetCommitResponse::default().with_topics(topics);
            return r.respond(ResponseKind::TxnOffsetCommit(resp));
        }
        let call = crate::group::wire::txn_offset_commit(req);
        let mut answer = b.groups.call(call, r.version, client_id, host).await?;
        if let ResponseKind::TxnOffsetCommit(resp) = &mut answer {
            resp.topics.extend(unknown);
        }
        r.respond(answer)
    }))
}

/// Every other API is the group coordinator's.
fn group_call(
    groups: Arc<GroupService>,
    r: Request,
    other: RequestKind,
    peer: Option<std::net::IpAddr>,
) -> std::result::Result<PendingResponse, Close> {
    let call = crate::group::wire::classify(other)
        .map_err(|other| Close(format!("no handler for {other:?}")))?;
    let client_id = r.client_id();
    let host = crate::group::wire::client_host(peer);
    Ok(Box::pin(async move {
        r.respond(groups.call(call, r.version, client_id, host).await?)
    }))
}

fn ready(encoded: Result<Bytes>) -> PendingResponse {
    Box::pin(async move { encoded.map(|b| Some(Frame::whole(b))) })
}
