"""A minimal Kafka wire-protocol client for raw-socket tests.

Only what the tests need, written from the protocol specification: framing,
request headers v1/v2, ApiVersions, Produce (v0-v8), Fetch (v4-v11),
Metadata (v1), AddPartitionsToTxn v4-v5 (a broker's batched form), v2 record
batches with CRC-32C, and a batch parser that reports
each batch's attributes (to see the compression codec a broker stored).
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22

ERR_NONE = 0
ERR_CORRUPT_MESSAGE = 2
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_NOT_LEADER_OR_FOLLOWER = 6
ERR_INVALID_REQUEST = 42
ERR_UNSUPPORTED_VERSION = 35
ERR_OUT_OF_ORDER_SEQUENCE_NUMBER = 45
ERR_DUPLICATE_SEQUENCE_NUMBER = 46
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
RETRIABLE_INIT_ERRORS = {14, 15, 16}
ERR_INVALID_RECORD = 87

COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class ProtocolError(Exception):
    pass


# ---------------------------------------------------------------- CRC-32C


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------- primitives


def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"short read: need {n} at {self.pos} of {len(self.data)}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def u32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def varint(self) -> int:
        z = self.uvarint()
        return (z >> 1) ^ -(z & 1)

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.take(n)

    def remaining(self) -> int:
        return len(self.data) - self.pos


# ---------------------------------------------------------------- record batches


@dataclass
class Record:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_delta: int = 0
    offset_delta: int = 0


def encode_record(r: Record, offset_delta: int) -> bytes:
    body = bytearray()
    body += b"\x00"  # attributes
    body += varint(r.timestamp_delta)
    body += varint(offset_delta)
    for part in (r.key, r.value):
        if part is None:
            body += varint(-1)
        else:
            body += varint(len(part)) + part
    body += varint(len(r.headers))
    for k, v in r.headers:
        kb = k.encode()
        body += varint(len(kb)) + kb
        body += varint(-1) if v is None else varint(len(v)) + v
    return varint(len(body)) + bytes(body)


def record_batch(
    records: list[Record],
    base_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_offset: int = 0,
) -> bytes:
    """An uncompressed magic-2 record batch with a correct CRC-32C."""
    if base_timestamp is None:
        base_timestamp = int(time.time() * 1000)
    recs = b"".join(encode_record(r, i) for i, r in enumerate(records))
    max_ts = base_timestamp + max((r.timestamp_delta for r in records), default=0)
    # Everything after the CRC field: covered by the CRC.
    after_crc = (
        struct.pack(">hiqqqhii", 0, len(records) - 1, base_timestamp, max_ts,
                    producer_id, producer_epoch, base_sequence, len(records))
        + recs
    )
    crc = crc32c(after_crc)
    # batchLength counts from partitionLeaderEpoch to the end.
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, -1, 2, crc) + after_crc


@dataclass
class BatchInfo:
    base_offset: int
    last_offset_delta: int
    attributes: int
    crc_ok: bool
    record_count: int
    producer_id: int
    base_sequence: int
    base_timestamp: int
    max_timestamp: int
    raw_records: bytes
    producer_epoch: int = -1

    @property
    def compression(self) -> int:
        return self.attributes & 0x7


def parse_batches(data: bytes) -> list[BatchInfo]:
    """Splits fetched bytes into batches; a partial trailing batch is dropped."""
    out = []
    pos = 0
    while pos + 12 <= len(data):
        base_offset, batch_len = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + batch_len
        if end > len(data):
            break
        magic = data[pos + 16]
        if magic != 2:
            raise ProtocolError(f"unexpected magic {magic} at batch offset {base_offset}")
        crc = struct.unpack_from(">I", data, pos + 17)[0]
        r = Reader(data[pos + 21:end])
        attributes = r.i16()
        last_delta = r.i32()
        base_ts = r.i64()
        max_ts = r.i64()
        pid = r.i64()
        epoch = r.i16()
        base_seq = r.i32()
        count = r.i32()
        out.append(BatchInfo(base_offset, last_delta, attributes, crc32c(data[pos + 21:end]) == crc,
                             count, pid, base_seq, base_ts, max_ts, data[pos + 61:end], epoch))
        pos = end
    return out


def decode_records(batch: BatchInfo) -> list[Record]:
    """Records of an uncompressed batch."""
    if batch.compression != 0:
        raise ProtocolError("decode_records handles uncompressed batches only")
    r = Reader(batch.raw_records)
    out = []
    for _ in range(batch.record_count):
        r.varint()  # length
        r.i8()  # attributes
        ts_delta = r.varint()
        off_delta = r.varint()
        kl = r.varint()
        key = None if kl < 0 else r.take(kl)
        vl = r.varint()
        value = None if vl < 0 else r.take(vl)
        headers = []
        for _ in range(r.varint()):
            hk = r.take(r.varint()).decode()
            hl = r.varint()
            headers.append((hk, None if hl < 0 else r.take(hl)))
        out.append(Record(key, value, headers, ts_delta, off_delta))
    return out


# ---------------------------------------------------------------- connection


def request_frame(api_key: int, version: int, correlation_id: int, body: bytes,
                  client_id: str | None = "helix-tests", flexible: bool = False) -> bytes:
    header = struct.pack(">hhi", api_key, version, correlation_id) + string(client_id)
    if flexible:
        header += b"\x00"  # no tagged fields
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


class Conn:
    """One TCP connection speaking raw Kafka frames."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, source: str | None = None):
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.next_id = 1
        self._versions: dict[int, tuple[int, int]] | None = None

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (n,) = struct.unpack(">i", self.recv_exact(4))
        if n < 4 or n > 256 << 20:
            raise ProtocolError(f"response frame length {n}")
        return self.recv_exact(n)

    def request(self, api_key: int, version: int, body: bytes, flexible_header: bool = False,
                flexible_response_header: bool | None = None) -> Reader:
        """Sends one request and returns a reader positioned on the response body."""
        cid = self.next_id
        self.next_id += 1
        self.send(request_frame(api_key, version, cid, body, flexible=flexible_header))
        frame = self.recv_frame()
        r = Reader(frame)
        got = r.i32()
        if got != cid:
            raise ProtocolError(f"correlation id {got}, expected {cid}")
        if flexible_response_header is None:
            flexible_response_header = flexible_header and api_key != API_API_VERSIONS
        if flexible_response_header:
            skip_tagged_fields(r)
        return r

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True if the peer closes (EOF or reset) within the timeout, reading and
        discarding anything it sends first; False if it stays open and silent."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False

    # ------------------------------------------------------------ APIs

    def api_versions(self, version: int = 0) -> dict[int, tuple[int, int]]:
        """ApiVersions v0 (or v3 with the flexible body); raises on an error code."""
        if version >= 3:
            body = compact_string("helix-tests") + compact_string("0.1") + b"\x00"
            r = self.request(API_API_VERSIONS, version, body, flexible_header=True)
        else:
            r = self.request(API_API_VERSIONS, version, b"")
        err, ranges = parse_api_versions(r, flexible=version >= 3)
        if err != ERR_NONE:
            raise ProtocolError(f"ApiVersions error {err}")
        self._versions = ranges
        return ranges

    def versions(self) -> dict[int, tuple[int, int]]:
        if self._versions is None:
            self.api_versions()
        assert self._versions is not None
        return self._versions

    def pick_version(self, api_key: int, lo: int, hi: int) -> int:
        """Highest version in [lo, hi] that the broker advertises."""
        vmin, vmax = self.versions().get(api_key, (1, 0))
        best = min(hi, vmax)
        if best < max(lo, vmin):
            raise ProtocolError(f"API {api_key}: broker serves v{vmin}-v{vmax}, this client v{lo}-v{hi}")
        return best

    def init_producer_id(self, timeout: float = 30.0) -> tuple[int, int]:
        """InitProducerId for an idempotent (non-transactional) producer:
        returns (producer_id, epoch). Retries the retriable coordinator errors
        (a freshly started broker may still be loading)."""
        v = self.pick_version(API_INIT_PRODUCER_ID, 0, 4)
        deadline = time.monotonic() + timeout
        while True:
            if v >= 2:
                body = compact_string(None) + struct.pack(">i", 60000)
                if v >= 3:
                    body += struct.pack(">qh", -1, -1)
                body += b"\x00"
                r = self.request(API_INIT_PRODUCER_ID, v, body, flexible_header=True)
            else:
                r = self.request(API_INIT_PRODUCER_ID, v, string(None) + struct.pack(">i", 60000))
            r.i32()  # throttle
            err = r.i16()
            pid = r.i64()
            epoch = r.i16()
            if err == ERR_NONE:
                return pid, epoch
            if err not in RETRIABLE_INIT_ERRORS or time.monotonic() > deadline:
                raise ProtocolError(f"InitProducerId error {err}")
            time.sleep(0.2)

    def produce(self, topic: str, partitions: dict[int, bytes], acks: int = -1,
                timeout_ms: int = 10000, version: int | None = None) -> dict[int, tuple[int, int]]:
        """Produce v0-v8 (non-flexible; v3 unless asked). Returns {partition: (error_code, base_offset)}."""
        v = version if version is not None else self.pick_version(API_PRODUCE, 3, 8)
        transactional_id = string(None) if v >= 3 else b""
        body = transactional_id + struct.pack(">hi", acks, timeout_ms) + struct.pack(">i", 1) + string(topic)
        body += struct.pack(">i", len(partitions))
        for p, data in partitions.items():
            body += struct.pack(">ii", p, len(data)) + data
        r = self.request(API_PRODUCE, v, body)
        out = {}
        for _ in range(r.i32()):
            r.string()
            for _ in range(r.i32()):
                p = r.i32()
                err = r.i16()
                base = r.i64()
                if v >= 2:
                    r.i64()  # log append time
                if v >= 5:
                    r.i64()  # log start offset
                if v >= 8:
                    for _ in range(r.i32()):
                        r.i32()
                        r.string()
                    r.string()
                out[p] = (err, base)
        return out

    def brokers(self) -> list[int]:
        """Metadata v1 for no topic: the ids of the brokers the node lists."""
        return self.brokers_and_controller()[0]

    def brokers_and_controller(self) -> tuple[list[int], int]:
        """Metadata v1 for no topic: the broker ids and the controller id
        (-1 while the node knows none)."""
        r = self.request(API_METADATA, 1, struct.pack(">i", 0))
        out = []
        for _ in range(r.i32()):
            out.append(r.i32()); r.string(); r.i32(); r.string()  # node, host, port, rack
        return out, r.i32()

    def leaders(self, topic: str) -> dict[int, tuple[int, int, list[int], list[int]]]:
        """Metadata v7 (non-flexible, with leader epochs) for one topic:
        {partition: (leader, leader_epoch, replicas, isr)}; raises on a topic error."""
        return self.brokers_and_leaders(topic)[1]

    def brokers_and_leaders(self, topic: str) -> tuple[list[int], dict[int, tuple[int, int, list[int], list[int]]]]:
        """One Metadata v7 answer for one topic: the broker ids it lists,
        and {partition: (leader, leader_epoch, replicas, isr)}; raises on a
        topic error."""
        body = struct.pack(">i", 1) + string(topic) + struct.pack(">b", 0)
        r = self.request(API_METADATA, 7, body)
        r.i32()  # throttle
        brokers = []
        for _ in range(r.i32()):
            brokers.append(r.i32()); r.string(); r.i32(); r.string()  # node, host, port, rack
        r.string()  # cluster id
        r.i32()  # controller
        out: dict[int, tuple[int, int, list[int], list[int]]] = {}
        for _ in range(r.i32()):
            err = r.i16()
            name = r.string()
            r.i8()  # is_internal
            if err != ERR_NONE:
                raise ProtocolError(f"Metadata: topic {name} error {err}")
            for _ in range(r.i32()):
                r.i16()
                index, leader, epoch = r.i32(), r.i32(), r.i32()
                replicas = [r.i32() for _ in range(r.i32())]
                isr = [r.i32() for _ in range(r.i32())]
                for _ in range(r.i32()):
                    r.i32()  # offline
                out[index] = (leader, epoch, replicas, isr)
        return brokers, out

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              max_wait_ms: int = 100, version: int | None = None) -> tuple[int, int, bytes]:
        """Fetch v4-v11 (non-flexible). Returns (error_code, high_watermark, records)."""
        v = version if version is not None else self.pick_version(API_FETCH, 4, 11)
        body = struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, 0)
        if v >= 7:
            body += struct.pack(">ii", 0, -1)  # session id, epoch: full fetch, no session
        body += struct.pack(">i", 1) + string(topic) + struct.pack(">ii", 1, partition)
        if v >= 9:
            body += struct.pack(">i", -1)  # current leader epoch
        body += struct.pack(">q", offset)
        if v >= 5:
            body += struct.pack(">q", -1)  # log start offset
        body += struct.pack(">i", max_bytes)
        if v >= 7:
            body += struct.pack(">i", 0)  # forgotten topics
        if v >= 11:
            body += string("")
        r = self.request(API_FETCH, v, body)
        r.i32()  # throttle
        if v >= 7:
            top_err = r.i16()
            r.i32()
            if top_err:
                return top_err, -1, b""
        result = (ERR_UNKNOWN_TOPIC_OR_PARTITION, -1, b"")
        for _ in range(r.i32()):
            r.string()
            for _ in range(r.i32()):
                p = r.i32()
                err = r.i16()
                hw = r.i64()
                r.i64()  # last stable offset
                if v >= 5:
                    r.i64()
                n_aborted = r.i32()
                for _ in range(max(n_aborted, 0)):
                    r.i64()
                    r.i64()
                if v >= 11:
                    r.i32()
                records = r.bytes_() or b""
                if p == partition:
                    result = (err, hw, records)
        return result

    def fetch_all(self, topic: str, partition: int, end_offset: int, start_offset: int = 0) -> list[BatchInfo]:
        """Every batch of a partition from start_offset up to end_offset."""
        batches: list[BatchInfo] = []
        offset = start_offset
        deadline = time.monotonic() + 60
        while offset < end_offset:
            if time.monotonic() > deadline:
                raise ProtocolError(f"fetch of {topic}/{partition} stuck at offset {offset}")
            err, _hw, data = self.fetch(topic, partition, offset)
            if err != ERR_NONE:
                raise ProtocolError(f"fetch {topic}/{partition}@{offset}: error {err}")
            for b in parse_batches(data):
                if b.base_offset + b.last_offset_delta >= offset:
                    batches.append(b)
                    offset = b.base_offset + b.last_offset_delta + 1
        return batches


def skip_tagged_fields(r: Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.take(r.uvarint())


def parse_api_versions(r: Reader, flexible: bool) -> tuple[int, dict[int, tuple[int, int]]]:
    err = r.i16()
    ranges = {}
    n = r.uvarint() - 1 if flexible else r.i32()
    for _ in range(max(n, 0)):
        key, vmin, vmax = r.i16(), r.i16(), r.i16()
        if flexible:
            skip_tagged_fields(r)
        ranges[key] = (vmin, vmax)
    return err, ranges


# ---------------------------------------------------------------- group APIs (issue 13)

API_OFFSET_COMMIT = 8
API_FIND_COORDINATOR = 10
API_JOIN_GROUP = 11
API_SYNC_GROUP = 14


def join_group_body(version: int, group: str, member_id: str, protocols: list[tuple[str, bytes]],
                    session_timeout_ms: int = 10_000, protocol_type: str = "consumer") -> bytes:
    """JoinGroup v2-v5 (non-flexible)."""
    body = string(group) + struct.pack(">ii", session_timeout_ms, session_timeout_ms) + string(member_id)
    if version >= 5:
        body += string(None)
    body += string(protocol_type) + struct.pack(">i", len(protocols))
    for name, meta in protocols:
        body += string(name) + struct.pack(">i", len(meta)) + meta
    return body


def parse_join_group(r: Reader, version: int) -> tuple[int, int, str]:
    """(error, generation, member_id) of a JoinGroup v2-v5 response."""
    r.i32()
    err = r.i16()
    generation = r.i32()
    r.string()  # protocol name
    r.string()  # leader
    member = r.string() or ""
    return err, generation, member


def sync_group_body(version: int, group: str, generation: int, member_id: str) -> bytes:
    """SyncGroup v1-v3 (non-flexible), no assignments (a follower's request)."""
    body = string(group) + struct.pack(">i", generation) + string(member_id)
    if version >= 3:
        body += string(None)
    return body + struct.pack(">i", 0)


def offset_commit_body(version: int, group: str, generation: int, member_id: str, topic: str,
                       partition: int, offset: int) -> bytes:
    """OffsetCommit v2-v7 (non-flexible), one partition."""
    body = string(group) + struct.pack(">i", generation) + string(member_id)
    if version <= 4:
        body += struct.pack(">q", -1)  # retention time
    if version >= 7:
        body += string(None)
    body += struct.pack(">i", 1) + string(topic) + struct.pack(">iiq", 1, partition, offset)
    if version >= 6:
        body += struct.pack(">i", -1)
    return body + string(None)


def parse_offset_commit(r: Reader, version: int) -> int:
    """Error code of the single partition in an OffsetCommit response."""
    if version >= 3:
        r.i32()
    errs = []
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            r.i32()
            errs.append(r.i16())
    if len(errs) != 1:
        raise ProtocolError(f"OffsetCommit answered {len(errs)} partitions")
    return errs[0]


def find_coordinator(conn: Conn, group: str, timeout: float = 60.0,
                     key_type: int = 0) -> tuple[int, str, int]:
    """FindCoordinator v1-v2 (non-flexible) for a group (key type 0) or a
    transactional id (1), retried while the coordinator loads (Kafka creates
    its offsets topic on the first request). Returns (node, host, port)."""
    v = conn.pick_version(API_FIND_COORDINATOR, 1, 2)
    deadline = time.monotonic() + timeout
    while True:
        r = conn.request(API_FIND_COORDINATOR, v, string(group) + struct.pack(">b", key_type))
        r.i32()
        err = r.i16()
        r.string()
        node, host, port = r.i32(), r.string() or "", r.i32()
        if err == ERR_NONE:
            return node, host, port
        if err not in RETRIABLE_INIT_ERRORS or time.monotonic() > deadline:
            raise ProtocolError(f"FindCoordinator error {err}")
        time.sleep(0.2)


COORDINATOR_GROUP, COORDINATOR_TRANSACTION = 0, 1
ERR_COORDINATOR_NOT_AVAILABLE = 15


def find_coordinator_once(conn: Conn, key: str, key_type: int) -> tuple[int, int]:
    """One FindCoordinator v1-v2 (non-flexible) for `key` of `key_type`
    (0 a group, 1 a transactional id), not retried: (error code, node)."""
    v = conn.pick_version(API_FIND_COORDINATOR, 1, 2)
    r = conn.request(API_FIND_COORDINATOR, v, string(key) + struct.pack(">b", key_type))
    r.i32()
    err = r.i16()
    r.string()
    return err, r.i32()


# ---------------------------------------------------------------- AddPartitionsToTxn v4-v5

API_ADD_PARTITIONS_TO_TXN = 24


def read_compact_string(r: Reader) -> str | None:
    n = r.uvarint()
    return None if n == 0 else r.take(n - 1).decode()


@dataclass
class BrokerTxn:
    """One transaction of a broker's AddPartitionsToTxn v4-v5 batch."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    verify_only: bool
    topics: dict[str, list[int]]


def add_partitions_to_txn_v4(conn: Conn, transactions: list[BrokerTxn],
                             version: int = 4) -> tuple[int, dict[str, dict[tuple[str, int], int]]]:
    """AddPartitionsToTxn v4-v5 (flexible; the form a partition leader sends
    its transaction coordinator, KIP-890 part 1). Returns the top-level error
    code and, per transactional id, each (topic, partition)'s code."""
    body = uvarint(len(transactions) + 1)
    for t in transactions:
        body += compact_string(t.transactional_id)
        body += struct.pack(">qhb", t.producer_id, t.producer_epoch, 1 if t.verify_only else 0)
        body += uvarint(len(t.topics) + 1)
        for name, partitions in t.topics.items():
            body += compact_string(name) + uvarint(len(partitions) + 1)
            body += b"".join(struct.pack(">i", p) for p in partitions) + b"\x00"
        body += b"\x00"
    body += b"\x00"
    r = conn.request(API_ADD_PARTITIONS_TO_TXN, version, body, flexible_header=True)
    r.i32()  # throttle
    top = r.i16()
    results: dict[str, dict[tuple[str, int], int]] = {}
    for _ in range(r.uvarint() - 1):
        tid = read_compact_string(r) or ""
        codes = results.setdefault(tid, {})
        for _ in range(r.uvarint() - 1):
            name = read_compact_string(r) or ""
            for _ in range(r.uvarint() - 1):
                p = r.i32()
                codes[(name, p)] = r.i16()
                skip_tagged_fields(r)
            skip_tagged_fields(r)
        skip_tagged_fields(r)
    skip_tagged_fields(r)
    return top, results
