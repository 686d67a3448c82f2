//! The two sparse per-segment indexes: `OffsetIndex` (offset → file position) and
//! `TimeIndex` (timestamp → offset). Both keep their entries in memory and append to their
//! file; a segment rebuilds them from its log file when they are missing or invalid.

mod offset_index;
mod time_index;

#[cfg(test)]
mod tests;

pub use offset_index::{OffsetIndexEntry, OFFSET_INDEX_ENTRY_BYTES};
pub use time_index::TIME_INDEX_ENTRY_BYTES;

pub(crate) use offset_index::OffsetIndex;
pub(crate) use time_index::TimeIndex;
