//! The native core of evidence_ledger: frame scan, canonical MessagePack decode, entry
//! decoding and checking (one at a time, in batches with their hashes, or straight into the
//! index's columns), entry and leaf hashing, interior hashing, compact ranges and tree roots.
//! Each entry point mirrors a pure-Python function (named in its doc) and is held to it by
//! the parity and property tests.
#![forbid(unsafe_code)]

mod batch;
mod columns;
mod entry;
mod frames;
mod merkle;
mod msgpack;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(frames::split_frames, m)?)?;
    m.add_function(wrap_pyfunction!(msgpack::decode, m)?)?;
    m.add_class::<entry::EntrySchema>()?;
    m.add("NotCanonical", m.py().get_type::<msgpack::NotCanonical>())?;
    m.add_function(wrap_pyfunction!(merkle::entry_hash, m)?)?;
    m.add_function(wrap_pyfunction!(merkle::leaf_hash, m)?)?;
    m.add_function(wrap_pyfunction!(merkle::node_hash, m)?)?;
    m.add_function(wrap_pyfunction!(merkle::root_of_leaves, m)?)?;
    m.add_class::<merkle::CompactRange>()?;
    m.add_function(wrap_pyfunction!(batch::read_entries, m)?)?;
    m.add_class::<columns::Layout>()?;
    Ok(())
}
