//! RFC 9162 §2.1.1 hashing: `evidence_ledger.format.entries.entry_hash` and
//! `evidence_ledger.tlog.merkle.leaf_hash`, `node_hash` and `root_of_leaves`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple, PyType};
use sha2::{Digest, Sha256};

pub type Hash = [u8; 32];

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

/// SHA-256(0x00 || data).
pub fn leaf(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

/// SHA-256(0x00 || data) (32 bytes).
#[pyfunction]
pub fn leaf_hash<'py>(py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &leaf(data))
}

/// SHA-256(0x01 || left || right) (32 bytes; the children's lengths are not checked).
#[pyfunction]
pub fn node_hash<'py>(py: Python<'py>, left: &[u8], right: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &node(left, right))
}

/// The perfect subtrees covering leaves `[0, size)`, largest first (`tlog.merkle`'s
/// compact range, whose `root()` equals MTH(D[0:size])).
#[derive(Default)]
pub struct Peaks {
    size: u64,
    peaks: Vec<Hash>,
}

impl Peaks {
    /// Add one leaf hash; ValueError when the range holds `u64::MAX` leaves already (as
    /// `CompactRangeReference.append`: RFC 9162 tree sizes are 64-bit).
    pub fn append(&mut self, leaf: Hash) -> PyResult<()> {
        if self.size == u64::MAX {
            return Err(PyValueError::new_err("the tree is full: 2**64 - 1 leaves"));
        }
        let mut hash = leaf;
        let mut n = self.size;
        while n & 1 == 1 {
            let left = self.peaks.pop().expect("one peak per set bit of the size");
            hash = node(&left, &hash);
            n >>= 1;
        }
        self.peaks.push(hash);
        self.size += 1;
        Ok(())
    }

    fn root(&self) -> Hash {
        match self.peaks.split_last() {
            None => Sha256::digest(b"").into(),
            Some((last, rest)) => rest.iter().rev().fold(*last, |acc, peak| node(peak, &acc)),
        }
    }
}

fn as_hash(leaf: &Bound<'_, PyAny>) -> PyResult<Hash> {
    let bytes = leaf.cast::<PyBytes>().map_err(|_| not_a_hash())?.as_bytes();
    bytes.try_into().map_err(|_| not_a_hash())
}

/// MTH of a sequence of 32-byte leaf hashes, folded as a compact range (O(log n) memory);
/// SHA-256("") when empty. ValueError if a leaf hash is not 32 bytes.
#[pyfunction]
pub fn root_of_leaves<'py>(
    py: Python<'py>,
    leaves: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut range = Peaks::default();
    for leaf in leaves.try_iter()? {
        range.append(as_hash(&leaf?)?)?;
    }
    Ok(PyBytes::new(py, &range.root()))
}

fn not_a_hash() -> PyErr {
    PyValueError::new_err("a leaf hash is not 32 bytes")
}

/// `evidence_ledger.tlog.merkle.CompactRangeReference` on the native core: the same
/// methods, values and errors.
#[pyclass(module = "evidence_ledger._native._core")]
#[derive(Default)]
pub struct CompactRange {
    pub range: Peaks,
}

#[pymethods]
impl CompactRange {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// The range of `size` leaves whose perfect subtrees, largest first, hash to `peaks`.
    /// ValueError unless `size` is an int in [0, 2**64) and there is one 32-byte hash per
    /// set bit of it; TypeError if `peaks` is not iterable.
    #[classmethod]
    fn from_peaks(
        _cls: &Bound<'_, PyType>,
        size: &Bound<'_, PyAny>,
        peaks: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let wrong = || {
            let want = size.extract::<u64>().map_or(0, u64::count_ones);
            PyValueError::new_err(format!("want {want} peaks of 32 bytes for size {size}"))
        };
        let count: u64 = size.extract().map_err(|_| wrong())?;
        let mut hashes = Vec::new();
        for peak in peaks.try_iter()? {
            let peak = peak?;
            let bytes = peak.cast::<PyBytes>().map_err(|_| wrong())?.as_bytes();
            hashes.push(Hash::try_from(bytes).map_err(|_| wrong())?);
        }
        if hashes.len() != count.count_ones() as usize {
            return Err(wrong());
        }
        Ok(CompactRange {
            range: Peaks {
                size: count,
                peaks: hashes,
            },
        })
    }

    /// Leaves appended so far.
    #[getter]
    fn size(&self) -> u64 {
        self.range.size
    }

    /// The roots of the perfect subtrees covering `[0, size)`, largest first.
    #[getter]
    fn peaks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.range.peaks.iter().map(|p| PyBytes::new(py, p)))
    }

    /// Add one leaf hash (32 bytes) at index `size`. ValueError if it is not 32 bytes.
    fn append(&mut self, leaf: &Bound<'_, PyAny>) -> PyResult<()> {
        self.range.append(as_hash(leaf)?)
    }

    /// MTH of the leaves appended so far (32 bytes); SHA-256("") when empty.
    fn root<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.range.root())
    }
}
