//! The value of every record the tool sends: a header that names the record
//! (run, producer, sequence), when it was due to be sent, and a CRC32C over
//! all of it, then filler up to the message size. The verifier and the
//! end-to-end latency both read it back from the log.
//!
//! ```text
//! magic "HXW1" | run u64 | producer u32 | seq u64 | due_us u64 | crc32c u32 | filler
//! ```
//! Integers are little-endian; the CRC covers every byte but its own four.

pub const HEADER_LEN: usize = 36;
const MAGIC: &[u8; 4] = b"HXW1";
const CRC_AT: usize = 32;

/// Who sent a record and when it was due, as carried in its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub run: u64,
    pub producer: u32,
    pub seq: u64,
    /// Microseconds from the run's start to the record's scheduled send.
    pub due_us: u64,
}

/// Writes `stamp` into `buf` (already filled to the message size) and
/// seals it with the checksum.
pub fn encode(buf: &mut [u8], stamp: Stamp) {
    buf[0..4].copy_from_slice(MAGIC);
    buf[4..12].copy_from_slice(&stamp.run.to_le_bytes());
    buf[12..16].copy_from_slice(&stamp.producer.to_le_bytes());
    buf[16..24].copy_from_slice(&stamp.seq.to_le_bytes());
    buf[24..32].copy_from_slice(&stamp.due_us.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[..CRC_AT]), &buf[HEADER_LEN..]);
    buf[CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// The stamp of a value this tool wrote, or None when the value is not one
/// (wrong length, magic or checksum): a corrupted or foreign record.
pub fn decode(value: &[u8]) -> Option<Stamp> {
    if value.len() < HEADER_LEN || &value[0..4] != MAGIC {
        return None;
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&value[..CRC_AT]), &value[HEADER_LEN..]);
    if crc.to_le_bytes() != value[CRC_AT..HEADER_LEN] {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(value[at..at + 8].try_into().expect("8 bytes"));
    Some(Stamp {
        run: u64_at(4),
        producer: u32::from_le_bytes(value[12..16].try_into().expect("4 bytes")),
        seq: u64_at(16),
        due_us: u64_at(24),
    })
}

/// Filler for the bytes after the header: varied so that compression has
/// some work and a shifted copy does not pass the checksum.
pub fn template(size: usize, producer: u32) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(producer);
    (0..size)
        .map(|i| {
            if i.is_multiple_of(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            // Half the bytes from a small alphabet: roughly 2:1 compressible.
            if i.is_multiple_of(2) {
                b'a' + (i % 16) as u8
            } else {
                (x >> ((i % 8) * 8)) as u8
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMP: Stamp = Stamp {
        run: 7,
        producer: 3,
        seq: 123_456,
        due_us: 99,
    };

    #[test]
    fn a_stamp_reads_back() {
        let mut buf = template(100, 3);
        encode(&mut buf, STAMP);
        assert_eq!(decode(&buf), Some(STAMP));
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        let mut buf = template(64, 1);
        encode(&mut buf, STAMP);
        for byte in 0..buf.len() {
            for bit in 0..8 {
                let mut bad = buf.clone();
                bad[byte] ^= 1 << bit;
                assert_eq!(decode(&bad), None, "byte {byte} bit {bit}");
            }
        }
        assert_eq!(decode(&buf[..buf.len() - 1]), None, "a shortened value");
        assert_eq!(
            decode(&buf[..HEADER_LEN - 1]),
            None,
            "shorter than a header"
        );
    }
}
