//! Entries decoded straight into the index's columns: the fast path of
//! `evidence_ledger.index.columns.fill_columns_reference`, row for row.
//!
//! A `Layout` holds every entry kind's body fields (name, check, column), built once from
//! `evidence_ledger.format.entries.BODY_FIELDS`. `Layout.fill` reads records one by one: a
//! record it takes is canonical MessagePack holding a well-formed entry of a known kind
//! (what `decode_entry` accepts); its row goes to the kind's column lists. It stops at the
//! first record it does not take (never a partial row): the Python side asks the reference
//! why, or takes the record itself (this core accepts a subset: no nested maps, no kind
//! whose fields it has no check for).

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use sha2::{Digest, Sha256};

use crate::entry::{is_signature_text, parse_check, Check};

struct Field {
    key: Vec<u8>,
    check: Check,
    column: Option<usize>,
}

struct Kind {
    fields: Vec<Field>,
    columns: usize,
}

/// One body value, as far as a known field can hold it.
enum Cell<'a> {
    Nil,
    Bool(bool),
    Int(u64),
    Str(&'a str),
    Bin(&'a [u8]),
    Strs(Vec<&'a str>),
}

struct Refused;
type Step<T> = Result<T, Refused>;

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

const TOP_KEYS: [&[u8]; 7] = [b"v", b"seq", b"body", b"kind", b"prev", b"refs", b"time"];

fn str_key(name: &[u8]) -> Vec<u8> {
    // keys of our layout are short (fixstr): the canonical order compares these bytes
    let mut key = vec![0xa0 | name.len() as u8];
    key.extend_from_slice(name);
    key
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Step<&'a [u8]> {
        if self.data.len() - self.pos < n {
            return Err(Refused);
        }
        let out = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn byte(&mut self) -> Step<u8> {
        Ok(self.take(1)?[0])
    }

    fn uint_bytes(&mut self, n: usize, min: u64) -> Step<u64> {
        let v = self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| acc << 8 | u64::from(*b));
        if v < min {
            return Err(Refused);
        }
        Ok(v)
    }

    /// A non-negative integer in its shortest form.
    fn uint(&mut self) -> Step<u64> {
        let tag = self.byte()?;
        self.uint_after(tag)
    }

    fn uint_after(&mut self, tag: u8) -> Step<u64> {
        match tag {
            0x00..=0x7f => Ok(u64::from(tag)),
            0xcc => self.uint_bytes(1, 0x80),
            0xcd => self.uint_bytes(2, 0x100),
            0xce => self.uint_bytes(4, 0x1_0000),
            0xcf => self.uint_bytes(8, 0x1_0000_0000),
            _ => Err(Refused),
        }
    }

    fn str_after(&mut self, tag: u8) -> Step<&'a str> {
        let len = match tag {
            0xa0..=0xbf => usize::from(tag & 0x1f),
            0xd9 => self.uint_bytes(1, 0x20)? as usize,
            0xda => self.uint_bytes(2, 0x100)? as usize,
            0xdb => self.uint_bytes(4, 0x1_0000)? as usize,
            _ => return Err(Refused),
        };
        std::str::from_utf8(self.take(len)?).map_err(|_| Refused)
    }

    fn bin_after(&mut self, tag: u8) -> Step<&'a [u8]> {
        let len = match tag {
            0xc4 => self.uint_bytes(1, 0)?,
            0xc5 => self.uint_bytes(2, 0x100)?,
            0xc6 => self.uint_bytes(4, 0x1_0000)?,
            _ => return Err(Refused),
        };
        self.take(usize::try_from(len).map_err(|_| Refused)?)
    }

    fn hash(&mut self) -> Step<&'a [u8]> {
        if self.take(2)? != [0xc4, 0x20] {
            return Err(Refused);
        }
        self.take(32)
    }

    /// An array header in its shortest form; the count is bounded by the bytes left.
    fn array_len(&mut self) -> Step<usize> {
        let tag = self.byte()?;
        let len = match tag {
            0x90..=0x9f => u64::from(tag & 0x0f),
            0xdc => self.uint_bytes(2, 0x10)?,
            0xdd => self.uint_bytes(4, 0x1_0000)?,
            _ => return Err(Refused),
        };
        if len > (self.data.len() - self.pos) as u64 {
            return Err(Refused);
        }
        Ok(len as usize)
    }

    fn map_len(&mut self) -> Step<usize> {
        let tag = self.byte()?;
        let len = match tag {
            0x80..=0x8f => u64::from(tag & 0x0f),
            0xde => self.uint_bytes(2, 0x10)?,
            0xdf => self.uint_bytes(4, 0x1_0000)?,
            _ => return Err(Refused),
        };
        if len > (self.data.len() - self.pos) as u64 / 2 {
            return Err(Refused);
        }
        Ok(len as usize)
    }

    /// A top-level key: exactly `want`'s encoding.
    fn key(&mut self, want: &[u8]) -> Step<()> {
        let tag = self.byte()?;
        if self.str_after(tag)?.as_bytes() != want {
            return Err(Refused);
        }
        Ok(())
    }

    fn cell(&mut self) -> Step<Cell<'a>> {
        let tag = self.byte()?;
        Ok(match tag {
            0xc0 => Cell::Nil,
            0xc2 => Cell::Bool(false),
            0xc3 => Cell::Bool(true),
            0xa0..=0xbf | 0xd9..=0xdb => Cell::Str(self.str_after(tag)?),
            0xc4..=0xc6 => Cell::Bin(self.bin_after(tag)?),
            0x90..=0x9f | 0xdc | 0xdd => {
                self.pos -= 1;
                let len = self.array_len()?;
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    let tag = self.byte()?;
                    items.push(self.str_after(tag)?);
                }
                Cell::Strs(items)
            }
            _ => Cell::Int(self.uint_after(tag)?),
        })
    }

    /// The body map: keys (their encoded bytes) strictly increasing, values cells.
    fn body(&mut self) -> Step<Vec<(&'a [u8], Cell<'a>)>> {
        let len = self.map_len()?;
        let mut pairs: Vec<(&'a [u8], Cell<'a>)> = Vec::with_capacity(len);
        for _ in 0..len {
            let start = self.pos;
            let tag = self.byte()?;
            self.str_after(tag)?;
            let key = &self.data[start..self.pos];
            if pairs.last().is_some_and(|(previous, _)| key <= *previous) {
                return Err(Refused);
            }
            pairs.push((key, self.cell()?));
        }
        Ok(pairs)
    }
}

fn passes(check: &Check, cell: &Cell<'_>) -> bool {
    match (check, cell) {
        (Check::Str, Cell::Str(_)) | (Check::Bool, Cell::Bool(_)) => true,
        (Check::OptStr | Check::OptBool | Check::OptHash, Cell::Nil) => true,
        (Check::OptStr, Cell::Str(_)) | (Check::OptBool, Cell::Bool(_)) => true,
        (Check::Hash | Check::OptHash, Cell::Bin(b)) => b.len() == 32,
        (Check::Scope, Cell::Strs(_)) | (Check::Count, Cell::Int(_)) => true,
        (Check::OneOf(values), Cell::Nil) => values.iter().any(Option::is_none),
        (Check::OneOf(values), Cell::Str(s)) => values.iter().any(|v| v.as_deref() == Some(*s)),
        (Check::Signature, Cell::Str(s)) => is_signature_text(s),
        (Check::OptScope, Cell::Nil | Cell::Strs(_)) => true,
        _ => false,
    }
}

fn to_python<'py>(py: Python<'py>, cell: &Cell<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match cell {
        Cell::Nil => py.None().into_bound(py),
        Cell::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Cell::Int(i) => i.into_pyobject(py)?.into_any(),
        Cell::Str(s) => PyString::new(py, s).into_any(),
        Cell::Bin(b) => PyBytes::new(py, b).into_any(),
        Cell::Strs(items) => PyList::new(py, items)?.into_any(),
    })
}

/// A well-formed entry, decoded as far as its row needs.
struct Row<'a> {
    seq: u64,
    prev: &'a [u8],
    kind: &'a str,
    time: u64,
    refs: Vec<&'a [u8]>,
    body: Vec<(&'a [u8], Cell<'a>)>,
}

fn parse(data: &[u8]) -> Step<Row<'_>> {
    let mut r = Reader { data, pos: 0 };
    if r.byte()? != 0x87 {
        return Err(Refused);
    }
    r.key(TOP_KEYS[0])?;
    if r.byte()? != 0x01 {
        return Err(Refused); // the format version, 1
    }
    r.key(TOP_KEYS[1])?;
    let seq = r.uint()?;
    r.key(TOP_KEYS[2])?;
    let body = r.body()?;
    r.key(TOP_KEYS[3])?;
    let tag = r.byte()?;
    let kind = r.str_after(tag)?;
    r.key(TOP_KEYS[4])?;
    let prev = r.hash()?;
    r.key(TOP_KEYS[5])?;
    let count = r.array_len()?;
    let refs = (0..count).map(|_| r.hash()).collect::<Step<Vec<_>>>()?;
    r.key(TOP_KEYS[6])?;
    let time = r.uint()?;
    if r.pos != data.len() {
        return Err(Refused);
    }
    Ok(Row {
        seq,
        prev,
        kind,
        time,
        refs,
        body,
    })
}

/// Every entry kind's body fields and the index columns they fill; see the module doc.
#[pyclass(frozen, module = "evidence_ledger._native._core")]
pub struct Layout {
    kinds: HashMap<String, Kind>,
}

/// The check of `code` with the allowed `values` of a `one_of` (None for the others); a
/// `maps` check (no cell holds a map) is refused.
fn check_of(py: Python<'_>, code: &str, values: Option<Vec<Option<String>>>) -> PyResult<Check> {
    match (code, values) {
        ("one_of", Some(values)) => Ok(Check::OneOf(values)),
        ("one_of" | "maps", _) | (_, Some(_)) => {
            Err(PyValueError::new_err(format!("no check {code:?}")))
        }
        (code, None) => parse_check(code, &py.None().into_bound(py)),
    }
}

#[pymethods]
impl Layout {
    /// `kinds`: kind -> its body fields, each `(name, check, values, column)`: `check` one
    /// of str, opt_str, bool, opt_bool, hash, opt_hash, scope, count, signature, one_of
    /// (`values`: the allowed values, else None); `column`: the field's position among the
    /// kind's body columns, or None when the index keeps no column of it. A kind left
    /// out is never taken. Field names are under 32 bytes. ValueError on anything else.
    #[new]
    #[allow(clippy::type_complexity)]
    fn new(
        py: Python<'_>,
        kinds: HashMap<String, Vec<(String, String, Option<Vec<Option<String>>>, Option<usize>)>>,
    ) -> PyResult<Self> {
        let mut out = HashMap::new();
        for (name, specs) in kinds {
            let mut fields = Vec::with_capacity(specs.len());
            let mut columns = 0;
            for (field, code, values, column) in specs {
                if field.len() >= 32 {
                    return Err(PyValueError::new_err("a field name of 32 bytes or more"));
                }
                columns = columns.max(column.map_or(0, |c| c + 1));
                fields.push(Field {
                    key: str_key(field.as_bytes()),
                    check: check_of(py, &code, values)?,
                    column,
                });
            }
            fields.sort_by(|a, b| a.key.cmp(&b.key));
            out.insert(name, Kind { fields, columns });
        }
        Ok(Layout { kinds: out })
    }

    /// Append the rows of `records[begin:]` to `columns` (kind -> list of column lists:
    /// seq, entry hash, prev, time, refs (a tuple), then the kind's body columns; made
    /// for a kind on its first row), up to the first record not taken. Returns
    /// `(stop, hashes, leaves)`: that record's position (`len(records)` when all were
    /// taken), and the entry and leaf hashes of the rows appended (32 bytes each).
    fn fill<'py>(
        &self,
        py: Python<'py>,
        records: &Bound<'py, PyList>,
        begin: usize,
        columns: &Bound<'py, PyDict>,
    ) -> PyResult<(usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let (mut hashes, mut leaves) = (Vec::new(), Vec::new());
        let mut stop = begin;
        let mut lists: HashMap<String, Vec<Bound<'py, PyList>>> = HashMap::new();
        while stop < records.len() {
            let item = records.get_item(stop)?;
            let Ok(bytes) = item.cast::<PyBytes>() else {
                break;
            };
            let data = bytes.as_bytes();
            let Ok(row) = parse(data) else { break };
            let Some(kind) = self.kinds.get(row.kind) else {
                break;
            };
            if kind.fields.len() != row.body.len()
                || !kind
                    .fields
                    .iter()
                    .zip(&row.body)
                    .all(|(f, (key, cell))| f.key == *key && passes(&f.check, cell))
            {
                break;
            }
            let hash: [u8; 32] = Sha256::digest(data).into();
            let mut leaf = Sha256::new();
            leaf.update([0u8]);
            leaf.update(data);
            hashes.extend_from_slice(&hash);
            leaves.extend_from_slice(&leaf.finalize());
            if !lists.contains_key(row.kind) {
                lists.insert(
                    row.kind.to_string(),
                    kind_lists(columns, row.kind, kind.columns)?,
                );
            }
            let out = &lists[row.kind];
            out[0].append(row.seq)?;
            out[1].append(PyBytes::new(py, &hash))?;
            out[2].append(PyBytes::new(py, row.prev))?;
            out[3].append(row.time)?;
            let refs = row.refs.iter().map(|r| PyBytes::new(py, r));
            out[4].append(PyTuple::new(py, refs)?)?;
            for (field, (_, cell)) in kind.fields.iter().zip(&row.body) {
                if let Some(column) = field.column {
                    out[5 + column].append(to_python(py, cell)?)?;
                }
            }
            stop += 1;
        }
        Ok((stop, PyBytes::new(py, &hashes), PyBytes::new(py, &leaves)))
    }
}

/// The column lists of `kind` in `columns`, made (5 + `body` empty lists) if not there.
fn kind_lists<'py>(
    columns: &Bound<'py, PyDict>,
    kind: &str,
    body: usize,
) -> PyResult<Vec<Bound<'py, PyList>>> {
    let lists = match columns.get_item(kind)? {
        Some(lists) => lists.cast_into::<PyList>()?,
        None => {
            let py = columns.py();
            let made = PyList::new(py, (0..5 + body).map(|_| PyList::empty(py)))?;
            columns.set_item(kind, &made)?;
            made
        }
    };
    if lists.len() != 5 + body {
        return Err(PyValueError::new_err("column lists of another layout"));
    }
    lists.iter().map(|l| Ok(l.cast_into::<PyList>()?)).collect()
}
