//! The messages workers and servers exchange: a fixed 48-byte little-endian header followed by
//! the payload (array bytes, packed 2-bit codes, a command body or an error message), in one
//! buffer so a message is one MPI send.
//!
//! ```text
//! 0 kind u8 | 1 dtype u8 | 2 flags u8 | 3 0 | 4..8 head i32 | 8..16 id u64 | 16..24 key i64
//! 24..32 offset u64 | 32..40 len u64 | 40..44 threshold f32 | 44..48 row_width u32 | 48.. payload
//! ```

use crate::error::{Error, Result};

pub const HEADER_LEN: usize = 48;

/// What a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Worker -> server: a shard's initial value (only worker 0 sends these).
    Init = 1,
    /// Worker -> server: a shard's pushed value.
    Push = 2,
    /// Worker -> server: asks for a shard's value.
    Pull = 3,
    /// Worker -> server: a command (`head`, body in the payload).
    Command = 4,
    /// Worker -> server: this worker has freed its store; it sends nothing more.
    Done = 5,
    /// Any process -> any process: are you there? Answered by the communication thread itself.
    Ping = 6,
    /// Worker -> the other workers: this worker leaves the job (it freed its store, or its
    /// process ends) and starts no more collectives; `key` is how many it started. Handled by
    /// the communication thread itself; no answer.
    Leave = 7,
    /// Server -> worker: the request `id` is complete.
    Ack = 16,
    /// Server -> worker: the value asked for by `id`.
    Data = 17,
    /// Server -> worker: the request `id` failed; the payload is the message.
    Fail = 18,
    /// The answer to a [`Kind::Ping`].
    Pong = 19,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Init,
            2 => Kind::Push,
            3 => Kind::Pull,
            4 => Kind::Command,
            5 => Kind::Done,
            6 => Kind::Ping,
            7 => Kind::Leave,
            16 => Kind::Ack,
            17 => Kind::Data,
            18 => Kind::Fail,
            19 => Kind::Pong,
            _ => return None,
        })
    }

    /// True for answers (the server's, and pongs), which go back to the request that waits for them.
    pub fn is_reply(self) -> bool {
        matches!(self, Kind::Ack | Kind::Data | Kind::Fail | Kind::Pong)
    }
}

/// The payload of a push is packed 2-bit codes (see `compress`).
pub const FLAG_COMPRESSED: u8 = 1;
/// A push of a synchronous store (`dist_sync`): it joins its key's round.
pub const FLAG_SYNC: u8 = 2;
/// A push of row_sparse values (sent dense): the servers' updater gets the sum as a row_sparse
/// array of rows of `row_width` elements, so a lazy optimizer updates only the pushed rows.
pub const FLAG_ROW_SPARSE: u8 = 4;

/// A message header.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Header {
    pub kind: Kind,
    /// MXNet dtype code of the array in the payload.
    pub dtype: u8,
    pub flags: u8,
    /// Command head for [`Kind::Command`].
    pub head: i32,
    /// Request id, echoed by the reply.
    pub id: u64,
    pub key: i64,
    /// The shard's first element within its key.
    pub offset: u64,
    /// The shard's element count.
    pub len: u64,
    /// 2-bit compression threshold of a compressed push.
    pub threshold: f32,
    /// Elements per row of a [`FLAG_ROW_SPARSE`] push's key (0 otherwise).
    pub row_width: u32,
}

impl Header {
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            dtype: 0,
            flags: 0,
            head: 0,
            id: 0,
            key: 0,
            offset: 0,
            len: 0,
            threshold: 0.0,
            row_width: 0,
        }
    }

    /// A reply of `kind` to the request `req`.
    pub fn reply(kind: Kind, req: &Header) -> Header {
        Header {
            kind,
            id: req.id,
            key: req.key,
            offset: req.offset,
            len: req.len,
            dtype: req.dtype,
            ..Header::new(kind)
        }
    }

    /// A message buffer with this header and `payload_len` zeroed payload bytes to fill.
    pub fn message(&self, payload_len: usize) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN + payload_len];
        self.write(&mut b);
        b
    }

    /// A message with this header and an array's bytes as the payload (read after the writes
    /// pushed before; no zero-filled staging).
    pub fn message_of(&self, array: &crate::ndarray::NDArray) -> Result<Vec<u8>> {
        let mut b = Vec::with_capacity(HEADER_LEN + array.nbytes());
        b.resize(HEADER_LEN, 0);
        self.write(&mut b);
        array.append_bytes_to(&mut b)?;
        Ok(b)
    }

    /// A message with this header and `payload`.
    pub fn message_with(&self, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_LEN + payload.len());
        b.resize(HEADER_LEN, 0);
        self.write(&mut b);
        b.extend_from_slice(payload);
        b
    }

    fn write(&self, b: &mut [u8]) {
        b[0] = self.kind as u8;
        b[1] = self.dtype;
        b[2] = self.flags;
        b[3] = 0;
        b[4..8].copy_from_slice(&self.head.to_le_bytes());
        b[8..16].copy_from_slice(&self.id.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b[40..44].copy_from_slice(&self.threshold.to_le_bytes());
        b[44..48].copy_from_slice(&self.row_width.to_le_bytes());
    }

    /// Rewrites the request id of an encoded message.
    pub fn set_id(message: &mut [u8], id: u64) {
        message[8..16].copy_from_slice(&id.to_le_bytes());
    }

    pub fn read(b: &[u8]) -> Result<Header> {
        if b.len() < HEADER_LEN {
            return Err(Error::format(format!(
                "a kvstore message of {} bytes is shorter than its {HEADER_LEN}-byte header",
                b.len()
            )));
        }
        let kind = Kind::from_u8(b[0]).ok_or_else(|| {
            Error::format(format!("a kvstore message has an unknown kind {}", b[0]))
        })?;
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(Header {
            kind,
            dtype: b[1],
            flags: b[2],
            head: i32::from_le_bytes(b[4..8].try_into().expect("4 bytes")),
            id: u64_at(8),
            key: u64_at(16) as i64,
            offset: u64_at(24),
            len: u64_at(32),
            threshold: f32::from_le_bytes(b[40..44].try_into().expect("4 bytes")),
            row_width: u32::from_le_bytes(b[44..48].try_into().expect("4 bytes")),
        })
    }
}

/// A received message: its header and the whole buffer (the payload follows the header).
#[derive(Debug)]
pub struct Msg {
    pub header: Header,
    buf: Vec<u8>,
}

impl Msg {
    pub fn decode(buf: Vec<u8>) -> Result<Msg> {
        Ok(Msg {
            header: Header::read(&buf)?,
            buf,
        })
    }
    pub fn payload(&self) -> &[u8] {
        &self.buf[HEADER_LEN..]
    }
    /// The payload as text (commands and error messages).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(self.payload()).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let h = Header {
            kind: Kind::Push,
            dtype: 6,
            flags: FLAG_COMPRESSED,
            head: -3,
            id: u64::MAX - 1,
            key: -42,
            offset: 1 << 40,
            len: 12345,
            threshold: 0.5,
            row_width: 3,
        };
        let mut m = h.message_with(b"abc");
        assert_eq!(m.len(), HEADER_LEN + 3);
        Header::set_id(&mut m, 9);
        let msg = Msg::decode(m).unwrap();
        assert_eq!(msg.header, Header { id: 9, ..h });
        assert_eq!(msg.payload(), b"abc");
        let r = Header::reply(Kind::Ack, &msg.header);
        assert_eq!((r.id, r.key, r.offset, r.len), (9, -42, 1 << 40, 12345));
    }

    #[test]
    fn every_kind_decodes_as_itself() {
        for k in [
            Kind::Init,
            Kind::Push,
            Kind::Pull,
            Kind::Command,
            Kind::Done,
            Kind::Ping,
            Kind::Leave,
            Kind::Ack,
            Kind::Data,
            Kind::Fail,
            Kind::Pong,
        ] {
            let h = Header {
                key: 5,
                ..Header::new(k)
            };
            let m = Msg::decode(h.message(0)).unwrap();
            assert_eq!((m.header.kind, m.header.key), (k, 5));
            assert_eq!(k.is_reply(), matches!(k, Kind::Ack | Kind::Data | Kind::Fail | Kind::Pong));
        }
    }

    #[test]
    fn bad_messages_are_errors() {
        assert!(Header::read(&[1; 10]).is_err());
        let mut m = Header::new(Kind::Pull).message(0);
        m[0] = 99;
        let e = Header::read(&m).unwrap_err();
        assert!(e.message().contains("unknown kind 99"), "{e}");
    }
}
