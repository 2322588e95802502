//! Canonical MessagePack decoding: `evidence_ledger.format.encoding.decode`'s accept set.
//!
//! One pass over the bytes checks what the reference checks by re-encoding: every integer,
//! string, binary, array and map header in its shortest form (as msgpack's packer writes
//! with `use_bin_type=True`), map keys strings in strictly increasing order of their
//! encoded bytes, no floats, extension types or reserved bytes, valid UTF-8, containers
//! no deeper than `MAX_DEPTH`, and nothing after the value. A refusal raises
//! `NotCanonical` with no reason: the Python side asks the reference for its message.

use std::collections::HashMap;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

create_exception!(
    _core,
    NotCanonical,
    PyValueError,
    "Bytes the canonical decoder refuses."
);

const MAX_DEPTH: usize = 32;

/// A refusal, or a Python error raised while building the value.
enum Fail {
    Refused,
    Python(PyErr),
}

impl From<PyErr> for Fail {
    fn from(err: PyErr) -> Self {
        Fail::Python(err)
    }
}

impl From<std::convert::Infallible> for Fail {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

type Step<T> = Result<T, Fail>;

/// Map keys made once, by their encoded bytes (a fixstr's tag and text): a key found here
/// is this string again (no new string to build, check and hash), the same value.
pub type KeyCache = HashMap<Vec<u8>, Py<PyString>>;

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    keys: Option<&'a KeyCache>,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Step<&'a [u8]> {
        if self.data.len() - self.pos < n {
            return Err(Fail::Refused);
        }
        let out = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn uint(&mut self, n: usize) -> Step<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| acc << 8 | u64::from(*b)))
    }

    /// A length of `n` bytes that a shorter header could not have held (`min` and up).
    fn length(&mut self, n: usize, min: u64) -> Step<usize> {
        let len = self.uint(n)?;
        if len < min {
            return Err(Fail::Refused);
        }
        usize::try_from(len).map_err(|_| Fail::Refused)
    }

    /// A count of items, each at least `width` bytes, that the rest of the input can hold
    /// (so a hostile count costs no memory).
    fn count(&mut self, n: usize, min: u64, width: usize) -> Step<usize> {
        let len = self.length(n, min)?;
        if len > (self.data.len() - self.pos) / width {
            return Err(Fail::Refused);
        }
        Ok(len)
    }

    fn value<'py>(&mut self, py: Python<'py>, depth: usize) -> Step<Bound<'py, PyAny>> {
        let tag = self.take(1)?[0];
        let value = match tag {
            0x00..=0x7f => i64::from(tag).into_pyobject(py)?.into_any(),
            0xe0..=0xff => i64::from(tag as i8).into_pyobject(py)?.into_any(),
            0x80..=0x8f => self.map(py, usize::from(tag & 0x0f), depth)?,
            0x90..=0x9f => self.array(py, usize::from(tag & 0x0f), depth)?,
            0xa0..=0xbf => self.string(py, usize::from(tag & 0x1f))?,
            0xc0 => py.None().into_bound(py),
            0xc2 => false.into_pyobject(py)?.to_owned().into_any(),
            0xc3 => true.into_pyobject(py)?.to_owned().into_any(),
            0xc4 => self.binary(py, 1, 0)?,
            0xc5 => self.binary(py, 2, 0x100)?,
            0xc6 => self.binary(py, 4, 0x1_0000)?,
            0xcc => self.unsigned(py, 1, 0x80)?,
            0xcd => self.unsigned(py, 2, 0x100)?,
            0xce => self.unsigned(py, 4, 0x1_0000)?,
            0xcf => self.unsigned(py, 8, 0x1_0000_0000)?,
            0xd0 => self.signed(py, 1, -0x20)?,
            0xd1 => self.signed(py, 2, -0x80)?,
            0xd2 => self.signed(py, 4, -0x8000)?,
            0xd3 => self.signed(py, 8, -0x8000_0000)?,
            0xd9 => {
                let len = self.length(1, 0x20)?;
                self.string(py, len)?
            }
            0xda => {
                let len = self.length(2, 0x100)?;
                self.string(py, len)?
            }
            0xdb => {
                let len = self.length(4, 0x1_0000)?;
                self.string(py, len)?
            }
            0xdc => {
                let len = self.count(2, 0x10, 1)?;
                self.array(py, len, depth)?
            }
            0xdd => {
                let len = self.count(4, 0x1_0000, 1)?;
                self.array(py, len, depth)?
            }
            0xde => {
                let len = self.count(2, 0x10, 2)?;
                self.map(py, len, depth)?
            }
            0xdf => {
                let len = self.count(4, 0x1_0000, 2)?;
                self.map(py, len, depth)?
            }
            // 0xc1 (never used), 0xc7-0xc9 and 0xd4-0xd8 (extension types), 0xca-0xcb (floats)
            _ => return Err(Fail::Refused),
        };
        Ok(value)
    }

    /// An unsigned integer that the shorter forms could not hold (`min` and up).
    fn unsigned<'py>(&mut self, py: Python<'py>, n: usize, min: u64) -> Step<Bound<'py, PyAny>> {
        let v = self.uint(n)?;
        if v < min {
            return Err(Fail::Refused);
        }
        Ok(v.into_pyobject(py)?.into_any())
    }

    /// A signed integer below `max` (what fits a shorter form, or is not negative, is
    /// written shorter or unsigned).
    fn signed<'py>(&mut self, py: Python<'py>, n: usize, max: i64) -> Step<Bound<'py, PyAny>> {
        let raw = self.uint(n)?;
        let shift = 64 - 8 * n as u32;
        let v = ((raw << shift) as i64) >> shift;
        if v >= max {
            return Err(Fail::Refused);
        }
        Ok(v.into_pyobject(py)?.into_any())
    }

    fn binary<'py>(&mut self, py: Python<'py>, n: usize, min: u64) -> Step<Bound<'py, PyAny>> {
        let len = self.length(n, min)?;
        Ok(PyBytes::new(py, self.take(len)?).into_any())
    }

    fn string<'py>(&mut self, py: Python<'py>, len: usize) -> Step<Bound<'py, PyAny>> {
        let text = std::str::from_utf8(self.take(len)?).map_err(|_| Fail::Refused)?;
        Ok(PyString::new(py, text).into_any())
    }

    fn array<'py>(&mut self, py: Python<'py>, len: usize, depth: usize) -> Step<Bound<'py, PyAny>> {
        if depth >= MAX_DEPTH {
            return Err(Fail::Refused);
        }
        let list = PyList::empty(py);
        for _ in 0..len {
            list.append(self.value(py, depth + 1)?)?;
        }
        Ok(list.into_any())
    }

    /// A map key (its tag, a string's, at `pos`): from the cache where it is there.
    fn key<'py>(&mut self, py: Python<'py>, tag: u8, depth: usize) -> Step<Bound<'py, PyAny>> {
        if let (Some(keys), 0xa0..=0xbf) = (self.keys, tag) {
            let end = self.pos + 1 + usize::from(tag & 0x1f);
            if let Some(key) = self
                .data
                .get(self.pos..end)
                .and_then(|encoded| keys.get(encoded))
            {
                self.pos = end;
                return Ok(key.bind(py).clone().into_any());
            }
        }
        self.value(py, depth + 1)
    }

    fn map<'py>(&mut self, py: Python<'py>, len: usize, depth: usize) -> Step<Bound<'py, PyAny>> {
        if depth >= MAX_DEPTH {
            return Err(Fail::Refused);
        }
        let dict = PyDict::new(py);
        let mut previous: &[u8] = &[];
        for _ in 0..len {
            let start = self.pos;
            let tag = self.data.get(start).copied().ok_or(Fail::Refused)?;
            if !matches!(tag, 0xa0..=0xbf | 0xd9..=0xdb) {
                return Err(Fail::Refused); // a key that is not a string
            }
            let key = self.key(py, tag, depth)?;
            let encoded = &self.data[start..self.pos];
            if encoded <= previous {
                return Err(Fail::Refused); // out of order, or a repeat
            }
            previous = encoded;
            dict.set_item(key, self.value(py, depth + 1)?)?;
        }
        Ok(dict.into_any())
    }
}

/// The value of canonical MessagePack `data`, or None where `encoding.decode(data)` refuses
/// it; Err only for a Python error raised while building the value.
pub fn decode_value<'py>(
    py: Python<'py>,
    data: &[u8],
    keys: Option<&KeyCache>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let mut reader = Reader { data, pos: 0, keys };
    match reader.value(py, 0) {
        Ok(value) if reader.pos == data.len() => Ok(Some(value)),
        Ok(_) | Err(Fail::Refused) => Ok(None),
        Err(Fail::Python(err)) => Err(err),
    }
}

/// Decode canonical MessagePack `data` into None, bool, int, str, bytes, list and dict
/// (keys in the order read). Raises `NotCanonical` for any bytes that
/// `encoding.decode(data)` refuses.
#[pyfunction]
pub fn decode<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    decode_value(py, data, None)?.ok_or_else(|| NotCanonical::new_err(()))
}
