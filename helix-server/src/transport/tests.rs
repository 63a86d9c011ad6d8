//! The transport over real sockets on 127.0.0.1: order per lane, frames
//! coalesced per destination, drops while a peer is down, reconnects,
//! strangers refused, calls and their deadlines, and a stalled data lane
//! that does not hold up the control lane.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use super::*;

/// What a node received: (from, lane, payloads) per delivered frame.
#[derive(Default)]
struct Recorder {
    frames: Mutex<Vec<(u64, Lane, Vec<Bytes>)>>,
    /// How long each data frame is held before `deliver` returns (a
    /// receiver that cannot keep up).
    data_stall: Option<Duration>,
    /// How long a call takes to answer.
    call_delay: Duration,
    /// Peers reported lost, in order.
    lost: Mutex<Vec<u64>>,
}

impl Recorder {
    fn payloads(&self, lane: Lane) -> Vec<Bytes> {
        let frames = self.frames.lock().unwrap();
        frames
            .iter()
            .filter(|(_, l, _)| *l == lane)
            .flat_map(|(_, _, p)| p.iter().cloned())
            .collect()
    }

    fn frame_count(&self, lane: Lane) -> usize {
        self.frames
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, l, _)| *l == lane)
            .count()
    }

    fn senders(&self) -> Vec<u64> {
        self.frames
            .lock()
            .unwrap()
            .iter()
            .map(|(f, _, _)| *f)
            .collect()
    }
}

impl Inbound for Recorder {
    fn deliver(&self, from: u64, lane: Lane, payloads: Vec<Bytes>) {
        if lane == Lane::Data
            && let Some(d) = self.data_stall
        {
            std::thread::sleep(d);
        }
        self.frames.lock().unwrap().push((from, lane, payloads));
    }

    fn call(&self, from: u64, request: Bytes) -> CallFuture {
        let delay = self.call_delay;
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            if request.as_ref() == b"refuse" {
                return Err("refused by the test".to_string());
            }
            let mut answer = format!("from {from}: ").into_bytes();
            answer.extend_from_slice(&request);
            Ok(Bytes::from(answer))
        })
    }

    fn peer_lost(&self, node: u64) {
        self.lost.lock().unwrap().push(node);
    }
}

/// A transport with a lost-peer table of its own.
async fn start_transport(
    config: TransportConfig,
    inbound: Arc<dyn Inbound>,
) -> Result<Transport, TransportError> {
    let links = Arc::new(crate::replica::links::PeerLinks::new(helix_raft::NodeId(
        config.node,
    )));
    Transport::start(config, inbound, links).await
}

fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn config(
    node: u64,
    listen: SocketAddr,
    peers: &[(u64, SocketAddr)],
    cluster: &str,
) -> TransportConfig {
    let mut c = TransportConfig::new(
        node,
        listen,
        peers.iter().map(|(n, a)| (*n, a.to_string())).collect(),
        cluster.to_string(),
    );
    c.backoff = (Duration::from_millis(10), Duration::from_millis(200));
    c
}

/// Polls `cond` every 10 ms for up to 20 s.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn lane_up(t: &Transport, to: u64, lane: Lane) -> bool {
    t.status()
        .iter()
        .any(|p| p.node == to && p.lanes[lane.index()].connected)
}

async fn all_lanes_up(t: &Transport, to: u64) {
    eventually("every lane up", || {
        Lane::ALL.iter().all(|l| lane_up(t, to, *l))
    })
    .await;
}

/// Two nodes of cluster "c" that know each other.
async fn pair(a_in: Arc<Recorder>, b_in: Arc<Recorder>) -> (Transport, Transport) {
    let (a, b) = (free_addr(), free_addr());
    let ta = start_transport(config(1, a, &[(2, b)], "c"), a_in)
        .await
        .unwrap();
    let tb = start_transport(config(2, b, &[(1, a)], "c"), b_in)
        .await
        .unwrap();
    all_lanes_up(&ta, 2).await;
    all_lanes_up(&tb, 1).await;
    (ta, tb)
}

fn numbered(i: u32) -> Bytes {
    Bytes::from(i.to_be_bytes().to_vec())
}

#[tokio::test(flavor = "current_thread")]
async fn payloads_arrive_in_order_per_lane_and_leave_coalesced() {
    let rb = Arc::new(Recorder::default());
    let (ta, tb) = pair(Arc::new(Recorder::default()), rb.clone()).await;
    // Queued without yielding: the lane's sender finds them all waiting.
    for i in 0..1000u32 {
        assert!(ta.send(2, Lane::Data, numbered(i)));
        assert!(ta.send(2, Lane::Control, numbered(10_000 + i)));
    }
    eventually("all 2000 payloads", || {
        rb.payloads(Lane::Data).len() == 1000 && rb.payloads(Lane::Control).len() == 1000
    })
    .await;
    let data: Vec<Bytes> = (0..1000).map(numbered).collect();
    let control: Vec<Bytes> = (0..1000).map(|i| numbered(10_000 + i)).collect();
    assert_eq!(rb.payloads(Lane::Data), data);
    assert_eq!(rb.payloads(Lane::Control), control);
    assert!(rb.senders().iter().all(|f| *f == 1));
    assert!(
        rb.frame_count(Lane::Data) < 10,
        "1000 queued payloads went as {} frames",
        rb.frame_count(Lane::Data)
    );
    let sent = &ta.status()[0].lanes[Lane::Data.index()];
    assert_eq!(sent.sent_bytes, 4000);
    assert_eq!(sent.dropped, 0);
    assert_eq!(sent.queued_bytes, 0);
    ta.shutdown();
    tb.shutdown();
}

#[tokio::test(flavor = "current_thread")]
async fn a_down_peer_costs_a_counted_drop_not_a_queue() {
    let a = free_addr();
    let nobody = free_addr();
    let ta = start_transport(
        config(1, a, &[(2, nobody)], "c"),
        Arc::new(Recorder::default()),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..10_000u32 {
        assert!(!ta.send(2, Lane::Data, numbered(i)));
    }
    assert!(!ta.send(3, Lane::Control, numbered(0)), "node 3 is no peer");
    let s = &ta.status()[0];
    let data = &s.lanes[Lane::Data.index()];
    assert!(!data.connected);
    assert_eq!(data.queued_bytes, 0);
    assert_eq!(data.dropped, 10_000);
    assert!(matches!(
        ta.call(2, Bytes::from_static(b"x"), Duration::from_secs(1))
            .await,
        Err(TransportError::NotConnected(2))
    ));
    assert!(matches!(
        ta.call(3, Bytes::from_static(b"x"), Duration::from_secs(1))
            .await,
        Err(TransportError::UnknownPeer(3))
    ));
    ta.shutdown();
}

#[tokio::test(flavor = "current_thread")]
async fn a_lane_queue_is_bounded_in_bytes() {
    let (a, b) = (free_addr(), free_addr());
    let mut ca = config(1, a, &[(2, b)], "c");
    ca.lane_queue_bytes = [1000, 1000, 1000];
    let ta = start_transport(ca, Arc::new(Recorder::default()))
        .await
        .unwrap();
    let tb = start_transport(config(2, b, &[(1, a)], "c"), Arc::new(Recorder::default()))
        .await
        .unwrap();
    all_lanes_up(&ta, 2).await;
    // No yield between sends: the queue holds at most 1000 bytes.
    let accepted = (0..100)
        .filter(|_| ta.send(2, Lane::Data, Bytes::from(vec![7u8; 100])))
        .count();
    assert_eq!(accepted, 10);
    assert_eq!(ta.status()[0].lanes[Lane::Data.index()].dropped, 90);
    // A payload that could never fit a frame is refused outright.
    let huge = Bytes::from(vec![0u8; 64 << 20]);
    assert!(!ta.send(2, Lane::Control, huge));
    ta.shutdown();
    tb.shutdown();
}

#[tokio::test(flavor = "current_thread")]
async fn lanes_reconnect_when_the_peer_returns() {
    let (a, b) = (free_addr(), free_addr());
    let ra = Arc::new(Recorder::default());
    let ta = start_transport(config(1, a, &[(2, b)], "c"), ra.clone())
        .await
        .unwrap();
    let first = Arc::new(Recorder::default());
    let tb = start_transport(config(2, b, &[(1, a)], "c"), first.clone())
        .await
        .unwrap();
    all_lanes_up(&ta, 2).await;
    assert!(ta.send(2, Lane::Control, numbered(1)));
    eventually("first delivery", || {
        first.payloads(Lane::Control).len() == 1
    })
    .await;
    assert!(ra.lost.lock().unwrap().is_empty(), "no loss while it is up");

    tb.shutdown();
    eventually("lanes down after the peer left", || {
        Lane::ALL.iter().all(|l| !lane_up(&ta, 2, *l))
    })
    .await;
    assert!(!ta.send(2, Lane::Control, numbered(2)));
    // Its control connection broke once; the failed reconnects that follow
    // are not reported again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*ra.lost.lock().unwrap(), vec![2], "the host is told once");

    // The same node comes back on the same address.
    let mut again = None;
    for _ in 0..100 {
        match start_transport(config(2, b, &[(1, a)], "c"), Arc::new(Recorder::default())).await {
            Ok(t) => {
                again = Some(t);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let tb2 = again.expect("the peer address is free again");
    all_lanes_up(&ta, 2).await;
    let answer = ta
        .call(2, Bytes::from_static(b"ping"), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(answer.as_ref(), b"from 1: ping");
    let control = &ta.status()[0].lanes[Lane::Control.index()];
    assert!(control.reconnects >= 1);
    assert!(control.dropped >= 1);
    // Heard from again, its next loss is reported again.
    all_lanes_up(&tb2, 1).await;
    assert!(tb2.send(1, Lane::Control, numbered(3)));
    eventually("node 2 heard again", || {
        ra.payloads(Lane::Control).contains(&numbered(3))
    })
    .await;
    tb2.shutdown();
    eventually("the second loss", || ra.lost.lock().unwrap().len() == 2).await;
    assert_eq!(*ra.lost.lock().unwrap(), vec![2, 2]);
    ta.shutdown();
}

#[tokio::test(flavor = "current_thread")]
async fn strangers_are_refused() {
    let b = free_addr();
    let rb = Arc::new(Recorder::default());
    let tb = start_transport(config(2, b, &[(1, free_addr())], "c"), rb.clone())
        .await
        .unwrap();
    // Node 1 of another cluster, and node 9 (no member) of this one.
    let foreign = start_transport(
        config(1, free_addr(), &[(2, b)], "other"),
        Arc::new(Recorder::default()),
    )
    .await
    .unwrap();
    let unknown = start_transport(
        config(9, free_addr(), &[(2, b)], "c"),
        Arc::new(Recorder::default()),
    )
    .await
    .unwrap();
    for t in [&foreign, &unknown] {
        for _ in 0..20 {
            t.send(2, Lane::Control, numbered(1));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        match t
            .call(2, Bytes::from_static(b"x"), Duration::from_secs(2))
            .await
        {
            Err(TransportError::Call(2, why)) => assert!(
                why.contains("PermissionDenied") || why.contains("permission"),
                "{why}"
            ),
            Err(TransportError::NotConnected(2)) => {}
            other => panic!("a stranger's call was answered: {other:?}"),
        }
    }
    assert!(
        rb.frames.lock().unwrap().is_empty(),
        "a stranger's frames were delivered"
    );
    assert!(tb.status()[0].received_frames == 0);
    for t in [foreign, unknown, tb] {
        t.shutdown();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn calls_are_answered_refused_or_time_out() {
    let slow = Arc::new(Recorder {
        call_delay: Duration::from_millis(500),
        ..Recorder::default()
    });
    let (ta, tb) = pair(Arc::new(Recorder::default()), slow).await;
    let ok = ta
        .call(2, Bytes::from_static(b"hello"), Duration::from_secs(5))
        .await;
    assert_eq!(ok.unwrap().as_ref(), b"from 1: hello");
    let refused = ta
        .call(2, Bytes::from_static(b"refuse"), Duration::from_secs(5))
        .await;
    assert!(
        matches!(refused, Err(TransportError::Call(2, ref why)) if why == "refused by the test")
    );
    let late = ta
        .call(2, Bytes::from_static(b"hello"), Duration::from_millis(50))
        .await;
    assert!(matches!(late, Err(TransportError::Timeout(2))), "{late:?}");
    ta.shutdown();
    tb.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_data_lane_does_not_hold_up_control() {
    // The receiver takes 50 ms per data frame, and frames are small, so the
    // data backlog takes seconds to drain; control must pass it.
    let rb = Arc::new(Recorder {
        data_stall: Some(Duration::from_millis(50)),
        ..Recorder::default()
    });
    let (a, b) = (free_addr(), free_addr());
    let mut ca = config(1, a, &[(2, b)], "c");
    ca.max_frame_bytes = 64 << 10;
    let ta = start_transport(ca, Arc::new(Recorder::default()))
        .await
        .unwrap();
    let tb = start_transport(config(2, b, &[(1, a)], "c"), rb.clone())
        .await
        .unwrap();
    all_lanes_up(&ta, 2).await;
    let chunk = Bytes::from(vec![1u8; 60 << 10]);
    let mut queued = 0;
    for _ in 0..100 {
        if ta.send(2, Lane::Data, chunk.clone()) {
            queued += 1;
        }
    }
    assert_eq!(queued, 100);
    eventually("the data lane has started", || {
        rb.frame_count(Lane::Data) >= 1
    })
    .await;
    assert!(ta.send(2, Lane::Control, numbered(42)));
    eventually("the control payload", || {
        rb.payloads(Lane::Control).len() == 1
    })
    .await;
    let data_when_control_arrived = rb.frame_count(Lane::Data);
    assert!(
        data_when_control_arrived < 100,
        "control arrived only after the whole data backlog ({data_when_control_arrived} frames)"
    );
    eventually("the whole data backlog", || {
        rb.payloads(Lane::Data).len() == 100
    })
    .await;
    ta.shutdown();
    tb.shutdown();
}
