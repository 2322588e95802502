//! The log's frame parser: `evidence_ledger.format.framing.split_frames`, record for record.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

const MORE_FLAG: u32 = 0x8000_0000;
const MAX_RECORD: u32 = 16 * 1024 * 1024;
const HEADER: usize = 8;
const TAIL: usize = 4;
const BAD_HEADER: &str = "frame header fails its CRC-32";

fn be32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// The fields of a `FrameRun` (records, bad_records, groups, group_end, end, need,
/// problem) for the frames of `buf` from `start` that begin before `limit`; see
/// `framing.split_frames`. Never fails on bad bytes.
#[pyfunction]
#[pyo3(signature = (buf, start = 0, limit = None))]
#[allow(clippy::type_complexity)]
pub fn split_frames<'py>(
    py: Python<'py>,
    buf: &[u8],
    start: usize,
    limit: Option<i64>,
) -> PyResult<(
    Bound<'py, PyList>,
    Vec<usize>,
    usize,
    usize,
    usize,
    usize,
    String,
)> {
    let records = PyList::empty(py);
    let mut bad = Vec::new();
    let size = buf.len();
    let stop = match limit {
        Some(l) if l < size as i64 => l,
        _ => size as i64,
    };
    let (mut groups, mut group_end, mut pos) = (0usize, start, start);
    let (mut need, mut problem) = (HEADER, String::new());
    while (pos as i64) < stop && pos < size && size - pos >= HEADER {
        let word = be32(buf, pos);
        if crc32fast::hash(&buf[pos..pos + 4]) != be32(buf, pos + 4) {
            need = 0;
            problem = BAD_HEADER.to_string();
            break;
        }
        let length = word & !MORE_FLAG;
        if length > MAX_RECORD {
            need = 0;
            problem = format!("frame length {length} is too large");
            break;
        }
        let frame = HEADER + TAIL + length as usize;
        if size - pos < frame {
            need = frame;
            break;
        }
        let end = pos + frame;
        let data = &buf[pos + HEADER..end - TAIL];
        if crc32fast::hash(data) != be32(buf, end - TAIL) {
            bad.push(records.len());
        }
        records.append(PyBytes::new(py, data))?;
        pos = end;
        if word & MORE_FLAG == 0 {
            groups = records.len();
            group_end = pos;
        }
    }
    Ok((records, bad, groups, group_end, pos, need, problem))
}
