//! Entry decoding: `evidence_ledger.format.entries.decode_entry`'s accept set.
//!
//! An `EntrySchema` is built once from the Python side's description of every kind's body
//! fields (`entries.BODY_FIELDS`, as `entries.native_schema` writes it), so the fields and
//! their checks have one source. `decode` runs the canonical decoder, then the top-level and
//! body checks, and returns the entry as the Python side's `Entry` named tuple (its field
//! names interned and made once: see `msgpack::KeyCache`). A refusal
//! raises `NotCanonical` with no reason: the Python side asks the reference for its message.
//!
//! Key order needs no check of its own: the canonical decoder takes map keys only in
//! strictly increasing order of their encoded bytes, which is the canonical order, so a map
//! holding exactly the expected keys holds them in the expected order.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple, PyType};

use crate::msgpack::{self, KeyCache, NotCanonical};

const FORMAT_VERSION: i64 = 1;

/// One body field's check (the Python side's check function of the same name); the index's
/// column layout (`columns.rs`) takes the same checks, bar `Maps`.
pub enum Check {
    Str,
    OptStr,
    Bool,
    OptBool,
    Hash,
    OptHash,
    Scope,
    OptScope,
    Signature,
    Count,
    OneOf(Vec<Option<String>>),
    /// A list of maps, each with exactly these fields.
    Maps(Fields),
}

type Fields = Vec<(Py<PyString>, Check)>;

/// The check of `code` (as `entries.native_fields` names it); `arg` the values of `one_of`,
/// the fields of `maps`, else unused. ValueError or TypeError for anything else.
pub fn parse_check(code: &str, arg: &Bound<'_, PyAny>) -> PyResult<Check> {
    Ok(match code {
        "str" => Check::Str,
        "opt_str" => Check::OptStr,
        "bool" => Check::Bool,
        "opt_bool" => Check::OptBool,
        "hash" => Check::Hash,
        "opt_hash" => Check::OptHash,
        "scope" => Check::Scope,
        "opt_scope" => Check::OptScope,
        "signature" => Check::Signature,
        "count" => Check::Count,
        "one_of" => Check::OneOf(arg.extract()?),
        "maps" => Check::Maps(parse_fields(arg)?),
        other => return Err(PyValueError::new_err(format!("unknown check {other:?}"))),
    })
}

/// `[(name, code, arg), ...]` into fields.
fn parse_fields(spec: &Bound<'_, PyAny>) -> PyResult<Fields> {
    let mut out = Vec::new();
    for item in spec.try_iter()? {
        let (name, code, arg): (Bound<'_, PyString>, String, Bound<'_, PyAny>) = item?.extract()?;
        let name = PyString::intern(name.py(), name.to_str()?).unbind();
        out.push((name, parse_check(&code, &arg)?));
    }
    Ok(out)
}

fn is_hash(v: &Bound<'_, PyAny>) -> bool {
    v.cast::<PyBytes>().is_ok_and(|b| b.as_bytes().len() == 32)
}

fn is_scope(v: &Bound<'_, PyAny>) -> bool {
    v.cast::<PyList>()
        .is_ok_and(|l| l.iter().all(|s| s.is_instance_of::<PyString>()))
}

/// A 64-byte signature in standard base64: 86 characters of the alphabet, then `==`.
pub fn is_signature_text(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 88
        && bytes[..86]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
        && &bytes[86..] == b"=="
}

fn is_signature(v: &Bound<'_, PyAny>) -> bool {
    let Ok(text) = v.cast::<PyString>() else {
        return false;
    };
    text.to_str().is_ok_and(is_signature_text)
}

fn is_count(v: &Bound<'_, PyAny>) -> bool {
    v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() && v.extract::<u64>().is_ok()
}

fn one_of(v: &Bound<'_, PyAny>, values: &[Option<String>]) -> bool {
    if v.is_none() {
        return values.iter().any(Option::is_none);
    }
    let Ok(text) = v.cast::<PyString>() else {
        return false;
    };
    let Ok(text) = text.to_str() else {
        return false;
    };
    values
        .iter()
        .any(|allowed| allowed.as_deref() == Some(text))
}

fn passes(v: &Bound<'_, PyAny>, check: &Check) -> bool {
    match check {
        Check::Str => v.is_instance_of::<PyString>(),
        Check::OptStr => v.is_none() || v.is_instance_of::<PyString>(),
        Check::Bool => v.is_instance_of::<PyBool>(),
        Check::OptBool => v.is_none() || v.is_instance_of::<PyBool>(),
        Check::Hash => is_hash(v),
        Check::OptHash => v.is_none() || is_hash(v),
        Check::Scope => is_scope(v),
        Check::OptScope => v.is_none() || is_scope(v),
        Check::Signature => is_signature(v),
        Check::Count => is_count(v),
        Check::OneOf(values) => one_of(v, values),
        Check::Maps(fields) => v.cast::<PyList>().is_ok_and(|list| {
            list.iter().all(|item| {
                item.cast::<PyDict>()
                    .is_ok_and(|map| has_fields(map, fields))
            })
        }),
    }
}

/// `map` holds exactly `fields`, each passing its check.
fn has_fields(map: &Bound<'_, PyDict>, fields: &Fields) -> bool {
    let py = map.py();
    map.len() == fields.len()
        && fields.iter().all(
            |(name, check)| matches!(map.get_item(name.bind(py)), Ok(Some(v)) if passes(&v, check)),
        )
}

/// The entry format's fields and checks, and the class entries are returned as.
#[pyclass(frozen, module = "evidence_ledger._native._core")]
pub struct EntrySchema {
    kinds: HashMap<String, Fields>,
    top: [Py<PyString>; 7],
    entry_type: Py<PyType>,
    tuple_new: Py<PyAny>,
    keys: KeyCache,
}

/// `name`, by its encoding, in `keys`.
fn cache_name(py: Python<'_>, name: &Py<PyString>, keys: &mut KeyCache) -> PyResult<()> {
    let text = name.bind(py).to_str()?;
    if let Ok(length @ 0..=31) = u8::try_from(text.len()) {
        let mut encoded = vec![0xa0 | length];
        encoded.extend_from_slice(text.as_bytes());
        keys.insert(encoded, name.clone_ref(py));
    }
    Ok(())
}

/// Every field name of `fields` (and of the maps inside) in `keys`.
fn cache_fields(py: Python<'_>, fields: &Fields, keys: &mut KeyCache) -> PyResult<()> {
    for (name, check) in fields {
        cache_name(py, name, keys)?;
        if let Check::Maps(inner) = check {
            cache_fields(py, inner, keys)?;
        }
    }
    Ok(())
}

impl EntrySchema {
    /// The entry `data` holds, or None where the reference refuses it.
    pub fn entry<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.check(py, data) {
            Some(fields) => Ok(Some(
                self.tuple_new
                    .bind(py)
                    .call1((self.entry_type.bind(py), fields))?,
            )),
            None => Ok(None),
        }
    }

    fn check<'py>(&self, py: Python<'py>, data: &[u8]) -> Option<Bound<'py, PyTuple>> {
        let value = msgpack::decode_value(py, data, Some(&self.keys)).ok()??;
        let map = value.cast::<PyDict>().ok()?;
        if map.len() != 7 {
            return None;
        }
        let mut fields = Vec::with_capacity(7);
        for name in &self.top {
            fields.push(map.get_item(name.bind(py)).ok()??);
        }
        let [version, seq, body, kind, prev, refs, time] = <[_; 7]>::try_from(fields).ok()?;
        let exact_int =
            |v: &Bound<'_, PyAny>| v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>();
        let natural = |v: &Bound<'_, PyAny>| exact_int(v) && v.extract::<u64>().is_ok();
        let refs = refs.cast::<PyList>().ok()?;
        if !(exact_int(&version)
            && version.extract::<i64>().ok()? == FORMAT_VERSION
            && natural(&seq)
            && is_hash(&prev)
            && natural(&time)
            && refs.iter().all(|r| is_hash(&r)))
        {
            return None;
        }
        let body = body.cast::<PyDict>().ok()?;
        let kind_name = kind.cast::<PyString>().ok()?.to_str().ok()?;
        if !has_fields(body, self.kinds.get(kind_name)?) {
            return None;
        }
        let refs = PyTuple::new(py, refs.iter()).ok()?;
        PyTuple::new(
            py,
            [
                seq,
                prev,
                kind,
                time,
                body.clone().into_any(),
                refs.into_any(),
            ],
        )
        .ok()
    }
}

#[pymethods]
impl EntrySchema {
    /// `kinds`: {kind: [(field, check code, argument), ...]}; `entry_type`: the named tuple
    /// class (fields seq, prev, kind, time, body, refs) that `decode` returns.
    #[new]
    fn new(
        py: Python<'_>,
        kinds: &Bound<'_, PyDict>,
        entry_type: Bound<'_, PyType>,
    ) -> PyResult<Self> {
        let mut parsed = HashMap::new();
        for (kind, spec) in kinds.iter() {
            parsed.insert(kind.extract::<String>()?, parse_fields(&spec)?);
        }
        let top = ["v", "seq", "body", "kind", "prev", "refs", "time"]
            .map(|n| PyString::intern(py, n).unbind());
        let tuple_new = py.get_type::<PyTuple>().getattr("__new__")?.unbind();
        let mut keys = KeyCache::new();
        for name in &top {
            cache_name(py, name, &mut keys)?;
        }
        for fields in parsed.values() {
            cache_fields(py, fields, &mut keys)?;
        }
        Ok(EntrySchema {
            kinds: parsed,
            top,
            entry_type: entry_type.unbind(),
            tuple_new,
            keys,
        })
    }

    /// Decode and check canonical entry bytes; the entry (`entry_type`). Raises
    /// `NotCanonical` for any bytes `entries.decode_entry_reference` refuses.
    fn decode<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        match self.check(py, data) {
            Some(fields) => self
                .tuple_new
                .bind(py)
                .call1((self.entry_type.bind(py), fields)),
            None => Err(NotCanonical::new_err(())),
        }
    }
}
