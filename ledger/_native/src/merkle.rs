//! RFC 9162 §2.1.1 hashing: `evidence_ledger.format.entries.entry_hash` and
//! `evidence_ledger.tlog.merkle.leaf_hash`, `node_hash` and `root_of_leaves`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sha2::{Digest, Sha256};

type Hash = [u8; 32];

fn node(left: &[u8], right: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// SHA-256 of the entry bytes (32 bytes).
#[pyfunction]
pub fn entry_hash<'py>(py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &Sha256::digest(data))
}

/// SHA-256(0x00 || data) (32 bytes).
#[pyfunction]
pub fn leaf_hash<'py>(py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    PyBytes::new(py, &h.finalize())
}

/// SHA-256(0x01 || left || right) (32 bytes; the children's lengths are not checked).
#[pyfunction]
pub fn node_hash<'py>(py: Python<'py>, left: &[u8], right: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &node(left, right))
}

/// MTH of a sequence of 32-byte leaf hashes, folded as a compact range (O(log n) memory);
/// SHA-256("") when empty. ValueError if a leaf hash is not 32 bytes.
#[pyfunction]
pub fn root_of_leaves<'py>(
    py: Python<'py>,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut peaks: Vec<Hash> = Vec::new();
    let mut size: u64 = 0;
    for leaf in leaves.try_iter()? {
        let leaf = leaf?;
        let bytes = leaf.cast::<PyBytes>().map_err(|_| not_a_hash())?.as_bytes();
        let mut hash: Hash = bytes.try_into().map_err(|_| not_a_hash())?;
        let mut n = size;
        while n & 1 == 1 {
            let left = peaks.pop().expect("one peak per set bit of the size");
            hash = node(&left, &hash);
            n >>= 1;
        }
        peaks.push(hash);
        size += 1;
    }
    let root = match peaks.pop() {
        None => Sha256::digest(b"").into(),
        Some(last) => peaks.iter().rev().fold(last, |acc, peak| node(peak, &acc)),
    };
    Ok(PyBytes::new(py, &root))
}

fn not_a_hash() -> PyErr {
    PyValueError::new_err("a leaf hash is not 32 bytes")
}
