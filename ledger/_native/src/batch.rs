//! A batch of log records in one call: `evidence_ledger.tlog.entry_batch.read_entries`.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use sha2::{Digest, Sha256};

use crate::entry::EntrySchema;
use crate::merkle::{self, CompactRange};

/// For each record's bytes in `records`, in order: append its leaf hash to `tree`, and give
/// `(entry, entry hash)`, the entry as `schema` decodes it or None where the reference
/// refuses it. A list of tuples, one per record; TypeError if a record is not bytes,
/// ValueError if `tree` is full (as `CompactRange.append`).
#[pyfunction]
pub fn read_entries<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    schema: PyRef<'py, EntrySchema>,
    mut tree: PyRefMut<'py, CompactRange>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for record in records.iter() {
        let data = record.cast::<PyBytes>()?.as_bytes();
        tree.range.append(merkle::leaf(data))?;
        let entry = match schema.entry(py, data)? {
            Some(entry) => entry,
            None => py.None().into_bound(py),
        };
        let hash = PyBytes::new(py, &Sha256::digest(data));
        out.append(PyTuple::new(py, [entry, hash.into_any()])?)?;
    }
    Ok(out)
}
