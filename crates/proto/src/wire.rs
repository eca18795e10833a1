//! Little-endian field encoding with bounds-checked decoding.
//!
//! Primitive forms used by every message body:
//!
//! | form      | encoding                                        |
//! |-----------|-------------------------------------------------|
//! | `u8..u64` | little-endian, fixed width                      |
//! | `f64`     | IEEE-754 bits as a `u64`; NaN/∞ are malformed      |
//! | `bool`    | one byte, 0 or 1 (anything else is malformed)    |
//! | `str`     | `u16` byte length, then UTF-8 (≤ [`MAX_STR`])    |
//! | `list<T>` | `u16` count (≤ [`MAX_LIST`]), then the items     |
//! | `cpuset`  | `u8` word count (≤ 16), then that many `u64`s     |
//!
//! The [`Reader`] never panics and never allocates more than the input's
//! length: every length is checked against what remains before use.

use allot_topo::{CPUSET_WORDS, CpuSet};

/// Longest string field, in bytes.
pub const MAX_STR: usize = 4096;
/// Longest list field, in items.
pub const MAX_LIST: usize = 4096;

/// Splits `text` into pieces that each fit a string field, at character
/// boundaries; always at least one piece (empty for empty text). A reply
/// too long for one field goes out as several, each with `more` set but
/// the last.
pub fn str_pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(MAX_STR);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

/// Why a message body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ended inside a field.
    #[error("message truncated while reading {0}")]
    Truncated(&'static str),
    /// A field held a value outside its domain.
    #[error("malformed field {field}: {detail}")]
    Malformed {
        /// Name of the field that held the bad value (`items`, `spec.goal.kind`, …).
        field: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// Bytes were left after the last field.
    #[error("{0} unexpected bytes after the message body")]
    Trailing(usize),
}

/// Appends fields to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }
    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
    /// Appends a `u8`.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// Appends a `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends an `f64` (its IEEE-754 bits, little-endian).
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.u64(v.to_bits())
    }
    /// Appends a `bool`.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }
    /// Appends a string, truncated at a character boundary to [`MAX_STR`].
    pub fn str(&mut self, s: &str) -> &mut Self {
        let mut end = s.len().min(MAX_STR);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.buf.extend_from_slice(&s.as_bytes()[..end]);
        self
    }
    /// Appends a list of `u32`s (at most [`MAX_LIST`] are written).
    pub fn u32_list(&mut self, items: &[u32]) -> &mut Self {
        let n = items.len().min(MAX_LIST);
        self.u16(n as u16);
        for &v in &items[..n] {
            self.u32(v);
        }
        self
    }
    /// Appends a CPU set, trailing zero words omitted.
    pub fn cpuset(&mut self, set: &CpuSet) -> &mut Self {
        let words = set.words();
        let n = words.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
        self.u8(n as u8);
        for &w in &words[..n] {
            self.u64(w);
        }
        self
    }
}

/// Reads fields from a byte slice, checking every length.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated(what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    /// Reads a `u8`.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }
    /// Reads a `u16`.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    /// Reads a `u32`.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// Reads a `u64`.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// Reads an `f64`; NaN and infinities are malformed.
    pub fn f64(&mut self, what: &'static str) -> Result<f64, DecodeError> {
        let v = f64::from_bits(self.u64(what)?);
        if !v.is_finite() {
            return Err(DecodeError::Malformed {
                field: what,
                detail: format!("{v} is not a finite number"),
            });
        }
        Ok(v)
    }
    /// Reads a `bool`.
    pub fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::Malformed {
                field: what,
                detail: format!("boolean byte {v}"),
            }),
        }
    }
    /// Reads a string.
    pub fn str(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let n = self.u16(what)? as usize;
        if n > MAX_STR {
            return Err(DecodeError::Malformed {
                field: what,
                detail: format!("length {n} above {MAX_STR}"),
            });
        }
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Malformed {
            field: what,
            detail: "not UTF-8".into(),
        })
    }
    /// Reads a list of `u32`s.
    pub fn u32_list(&mut self, what: &'static str) -> Result<Vec<u32>, DecodeError> {
        let n = self.u16(what)? as usize;
        if n > MAX_LIST {
            return Err(DecodeError::Malformed {
                field: what,
                detail: format!("{n} items above {MAX_LIST}"),
            });
        }
        if self.buf.len() < n * 4 {
            return Err(DecodeError::Truncated(what));
        }
        (0..n).map(|_| self.u32(what)).collect()
    }
    /// Reads a CPU set.
    pub fn cpuset(&mut self, what: &'static str) -> Result<CpuSet, DecodeError> {
        let n = self.u8(what)? as usize;
        if n > CPUSET_WORDS {
            return Err(DecodeError::Malformed {
                field: what,
                detail: format!("{n} words above {CPUSET_WORDS}"),
            });
        }
        let mut words = [0u64; CPUSET_WORDS];
        for w in words.iter_mut().take(n) {
            *w = self.u64(what)?;
        }
        Ok(CpuSet::from_words(words))
    }
    /// Fails if bytes remain.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing(self.buf.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn str_pieces_fit_a_field_and_reassemble() {
        let s = "é".repeat(5000);
        let c = super::str_pieces(&s);
        assert!(c.len() > 1);
        assert!(c.iter().all(|p| p.len() <= super::MAX_STR));
        assert_eq!(c.concat(), s);
        assert_eq!(super::str_pieces(""), vec![String::new()]);
    }
}
