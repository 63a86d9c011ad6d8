//! Starts the real `helix-server` binary on a free 127.0.0.1 port with a
//! temporary data directory, and speaks raw Kafka to it with the
//! `kafka-protocol` codecs.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// A running broker process; killed when dropped.
pub struct BrokerProcess {
    child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
}

/// Ports handed out by [`free_port`]: below the kernel's ephemeral range
/// (32768-60999), so no outgoing connection takes one as its source port,
/// and a connect to a port nothing listens on yet can never connect to
/// itself (a self-connect made `start_with` return before its broker
/// listened, and the second broker of a test won the data-dir lock).
const PORTS: std::ops::Range<u32> = 20000..32000;

/// A port that was free a moment ago, not handed out before by this process.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = PORTS.end - PORTS.start;
    // Another test binary may run beside this one: start where the pid says.
    let offset = std::process::id() * 7919;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (PORTS.start + (offset + n) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {PORTS:?}")
}

/// Runs `cmd` to its end with stdout and stderr captured, at most `limit`:
/// a process that should have refused to start but serves is killed and
/// named, instead of hanging the test forever (`Command::output` waits
/// without a bound).
pub fn output_within(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let out = read(Box::new(child.stdout.take().expect("stdout")));
    let err = read(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} was still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

impl BrokerProcess {
    pub fn start(data_dir: &Path) -> BrokerProcess {
        Self::start_on(data_dir, free_port())
    }

    pub fn start_on(data_dir: &Path, port: u16) -> BrokerProcess {
        Self::start_with(data_dir, port, &[])
    }

    /// Starts the broker with `extra` flags after the usual ones.
    pub fn start_with(data_dir: &Path, port: u16, extra: &[&str]) -> BrokerProcess {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let child = Command::new(env!("CARGO_BIN_EXE_helix-server"))
            .args(["--listen", &addr.to_string(), "--data-dir"])
            .arg(data_dir)
            .args(["--log-level", "warn"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn helix-server");
        let mut b = BrokerProcess {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = b.child.try_wait() {
                panic!("helix-server exited with {status} before listening on {addr}");
            }
            assert!(
                Instant::now() < deadline,
                "helix-server did not start listening on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        b
    }

    /// kill -9.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "helix-server ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn connect(&self) -> Client {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        Client {
            stream: s,
            next_correlation: 1,
        }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw Kafka connection.
pub struct Client {
    pub stream: TcpStream,
    next_correlation: i32,
}

impl Client {
    /// Sends one request and reads its response.
    pub fn call(&mut self, key: ApiKey, version: i16, body: RequestKind) -> ResponseKind {
        let correlation = self.next_correlation;
        self.next_correlation += 1;
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_static_str("helix-test")))
            .encode(&mut buf, key.request_header_version(version))
            .expect("header");
        body.encode(&mut buf, version).expect("body");
        self.send_frame(&buf);
        let mut resp = self.read_frame().expect("a response frame");
        let header = ResponseHeader::decode(&mut resp, key.response_header_version(version))
            .expect("header");
        assert_eq!(header.correlation_id, correlation);
        ResponseKind::decode(key, &mut resp, version).expect("response body")
    }

    pub fn send_frame(&mut self, body: &[u8]) {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        self.stream.write_all(&out).expect("write");
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// The next frame, or None when the broker closed the connection.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut len = [0u8; 4];
        if self.stream.read_exact(&mut len).is_err() {
            return None;
        }
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(Bytes::from(body))
    }

    /// True when the broker has closed this connection.
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }
}

/// An uncompressed v2 batch of `values` with keys `k<i>`.
/// CreateTopics v7 of `name` with `partitions` partitions, RF 1; panics on
/// an error code.
pub fn create_topic(c: &mut Client, name: &str, partitions: i32) {
    use kafka_protocol::messages::{CreateTopicsRequest, TopicName, create_topics_request};
    let mut t = create_topics_request::CreatableTopic::default();
    t.name = TopicName(StrBytes::from_string(name.to_string()));
    t.num_partitions = partitions;
    t.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let ResponseKind::CreateTopics(resp) = c.call(ApiKey::CreateTopics, 7, req.into()) else {
        panic!("kind")
    };
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
}

pub fn batch(values: &[&str], timestamp: i64) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // No producer: base sequence -1. kafka-protocol keeps records
            // in one batch while offset - sequence is constant; with -1 for
            // every record it wrote one batch per record, which Produce v3+
            // refuses (INVALID_RECORD), as Kafka does.
            sequence: i as i32 - 1,
            timestamp: timestamp + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode batch");
    buf.freeze()
}

/// Skips `n` bytes of a buffer (for tests that peek into responses).
pub fn skip(b: &mut Bytes, n: usize) {
    b.advance(n);
}
