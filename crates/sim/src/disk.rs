//! A host's disk as its processes see it: `MemStorage` (whose crash drops every unsynced
//! write) plus fsync latency and the faults of a disk that fails or lies (issue 19).
//!
//! **fsync latency.** The storage interface is synchronous, so an fsync cannot yield simulated
//! time by itself; instead every fsync (of a file or a directory) adds its latency to the
//! host's *IO debt*, and the world then keeps the host blocked — not stepped, like a process
//! stuck in `fsync(2)` — for that long before it runs again (its clock jumps and its overdue
//! timers fire, as after a pause).
//!
//! **Faults** ([`DiskFaults`], one per machine: they outlive process restarts, a replaced disk
//! starts without them). Each is a [`Rule`] scoped to a directory (a log directory, or the
//! whole disk), either *persistent* until [`DiskFaults::heal`] — a full disk (ENOSPC on every
//! append, a partial prefix may land, as a real `write(2)` fills the last free blocks), EIO on
//! every append, EIO on every read — or *one-shot*, used by the first operation it applies to:
//! - a failed fsync (of a file or a directory): EIO, and the file's unsynced data is gone —
//!   the dirty pages were dropped, reads return zeros there — while a later fsync succeeds
//!   (the fsyncgate lesson: a retry that succeeds proves nothing);
//! - a torn write: the next append to a segment file stores a prefix of its bytes and
//!   garbage after it, and reports success;
//! - a misdirected write: the next append to a segment file lands elsewhere — over the bytes
//!   of a segment file of the same partition, at a random place — and the intended place gets
//!   stale bytes (zeros);
//! - a lost write: the next append to a segment file, and the fsync after it, report success,
//!   but a power loss finds zeros there (the drive acknowledged a write it never made; the page
//!   cache hides it until then).
//!
//! Bit rot (flipped bits in stored data, durable or not) needs no rule: the world flips them in
//! the `MemStorage` directly ([`crate::world::World::corrupt`]). Every random choice (prefix
//! lengths, garbage, where a misdirected write lands) comes from the disk's own generator,
//! seeded from the run's seed, and every fault that strikes is noted for the trace, so a run
//! replays bit for bit.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use keel_log::storage::{DirEntry, DirLock, MemStorage, OpenMode, Storage, StorageFile};
use keel_log::QUARANTINE_SUFFIX;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Linux's EIO.
const EIO: i32 = 5;
/// Linux's ENOSPC.
const ENOSPC: i32 = 28;
/// The suffix of segment files, the only files lying writes strike.
const SEGMENT_SUFFIX: &str = ".log";

/// What a disk does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DiskFault {
    /// No space left: every append fails with ENOSPC (after a partial prefix) until healed.
    Full,
    /// Every append fails with EIO (after a partial prefix) until healed.
    WriteErrors,
    /// Every read fails with EIO until healed.
    ReadErrors,
    /// The next fsync fails with EIO and drops the file's unsynced data.
    FailedFsync,
    /// The next append to a segment file stores a prefix and garbage, and reports success.
    TornWrite,
    /// The next append to a segment file lands over other data of the partition; the intended
    /// place gets zeros.
    MisdirectedWrite,
    /// The next append to a segment file is gone after a power loss, though it and its fsync
    /// reported success.
    LostWrite,
}

impl DiskFault {
    /// Whether the fault lasts until healed (rather than striking once).
    pub fn persistent(self) -> bool {
        matches!(
            self,
            DiskFault::Full | DiskFault::WriteErrors | DiskFault::ReadErrors
        )
    }

    /// Whether the fault strikes appends to segment files only.
    fn segments_only(self) -> bool {
        matches!(
            self,
            DiskFault::TornWrite | DiskFault::MisdirectedWrite | DiskFault::LostWrite
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            DiskFault::Full => "disk full (ENOSPC)",
            DiskFault::WriteErrors => "write errors (EIO)",
            DiskFault::ReadErrors => "read errors (EIO)",
            DiskFault::FailedFsync => "a failed fsync",
            DiskFault::TornWrite => "a torn write",
            DiskFault::MisdirectedWrite => "a misdirected write",
            DiskFault::LostWrite => "a lost write",
        }
    }

    /// Whether the fault makes the disk return other bytes than were written (rather than
    /// fail loudly).
    pub fn lies(self) -> bool {
        matches!(
            self,
            DiskFault::TornWrite | DiskFault::MisdirectedWrite | DiskFault::LostWrite
        )
    }
}

/// A fault and the directory it applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Paths at or below this one (component-wise).
    pub scope: PathBuf,
    pub fault: DiskFault,
}

/// Bytes a lost write left in the page cache only: zeros after a power loss.
#[derive(Debug, Clone)]
struct LostRange {
    path: PathBuf,
    pos: u64,
    len: u64,
}

/// The faults of one machine's disk.
#[derive(Debug)]
pub struct DiskFaults {
    host: String,
    state: Mutex<FaultState>,
}

#[derive(Debug)]
struct FaultState {
    rng: StdRng,
    rules: Vec<Rule>,
    lost: Vec<LostRange>,
    events: Vec<String>,
    /// Files whose failed reads were noted since the last heal (a read error repeats on every
    /// read: noted once per file).
    unreadable: std::collections::BTreeSet<PathBuf>,
    /// Faults that struck so far.
    struck: u64,
}

/// What an append does, decided before it touches the file.
enum AppendPlan {
    /// Write the bytes as given.
    Write,
    /// Write this prefix, then fail.
    Fail { prefix: usize, error: io::Error },
    /// Write these bytes instead (same length), report success.
    Store(Vec<u8>),
    /// Write the bytes, and forget them at a power loss.
    Lost,
    /// Write zeros instead, and land the bytes over `(file, position)` (if any place fits).
    Misdirect(Option<(PathBuf, u64)>),
}

impl DiskFaults {
    /// A disk without faults; its random choices come from `seed`.
    pub fn new(host: &str, seed: u64) -> DiskFaults {
        DiskFaults {
            host: host.to_string(),
            state: Mutex::new(FaultState {
                rng: StdRng::seed_from_u64(seed),
                rules: Vec::new(),
                lost: Vec::new(),
                events: Vec::new(),
                unreadable: Default::default(),
                struck: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a fault for paths at or below `scope`.
    pub fn add(&self, scope: &Path, fault: DiskFault) {
        let mut state = self.lock();
        state.rules.push(Rule {
            scope: scope.to_path_buf(),
            fault,
        });
        let host = &self.host;
        state.events.push(format!(
            "{host} disk: {} {} under {}",
            fault.name(),
            if fault.persistent() {
                "from now on"
            } else {
                "armed"
            },
            scope.display()
        ));
    }

    /// Ends every fault (space returns, IO works again); what they did to the data stays.
    pub fn heal(&self) {
        let mut state = self.lock();
        let healed = state.rules.len();
        state.rules.clear();
        state.unreadable.clear();
        state.events.push(format!(
            "{} disk: healed ({healed} faults ended)",
            self.host
        ));
    }

    /// The faults in force.
    pub fn rules(&self) -> Vec<Rule> {
        self.lock().rules.clone()
    }

    /// How many faults struck so far.
    pub fn struck(&self) -> u64 {
        self.lock().struck
    }

    /// The faults that struck since the last call, for the trace.
    pub fn take_events(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().events)
    }

    /// Notes an event of this disk for the trace.
    pub fn note(&self, event: String) {
        self.lock().events.push(event);
    }

    /// Draws from the disk's generator.
    pub fn with_rng<R>(&self, f: impl FnOnce(&mut StdRng) -> R) -> R {
        f(&mut self.lock().rng)
    }

    /// A power loss: the lost writes read back as zeros (call before the storage's crash,
    /// while the paths still name the files).
    pub fn power_loss(&self, storage: &MemStorage) {
        let lost = std::mem::take(&mut self.lock().lost);
        for range in lost {
            let Some(size) = file_size(storage, &range.path) else {
                continue;
            };
            let end = (range.pos + range.len).min(size);
            if end <= range.pos {
                continue;
            }
            let zeros = vec![0u8; usize::try_from(end - range.pos).unwrap_or(0)];
            if storage.overwrite(&range.path, range.pos, &zeros).is_ok() {
                self.note(format!(
                    "{} disk: the lost write of {} bytes {}..{end} reads back as zeros",
                    self.host,
                    range.path.display(),
                    range.pos
                ));
            }
        }
    }

    /// Takes the first rule that applies to `path` for `op`: persistent ones stay, one-shot
    /// ones are used up.
    fn strike(&self, state: &mut FaultState, path: &Path, op: Op) -> Option<DiskFault> {
        let segment = is_segment(path);
        let index = state.rules.iter().position(|rule| {
            path.starts_with(&rule.scope)
                && op.struck_by(rule.fault)
                && (!rule.fault.segments_only() || segment)
        })?;
        let fault = state.rules[index].fault;
        if !fault.persistent() {
            state.rules.remove(index);
        }
        state.struck += 1;
        Some(fault)
    }

    fn plan_append(&self, storage: &MemStorage, path: &Path, size: u64, data: &[u8]) -> AppendPlan {
        let mut state = self.lock();
        let Some(fault) = self.strike(&mut state, path, Op::Append) else {
            return AppendPlan::Write;
        };
        let host = &self.host;
        let at = format!(
            "{} bytes {size}..{}",
            path.display(),
            size + data.len() as u64
        );
        let prefix = if data.is_empty() {
            0
        } else {
            state.rng.gen_range(0..data.len())
        };
        match fault {
            DiskFault::Full | DiskFault::WriteErrors => {
                let (code, name) = if fault == DiskFault::Full {
                    (ENOSPC, "ENOSPC")
                } else {
                    (EIO, "EIO")
                };
                state.events.push(format!(
                    "{host} disk: {name} writing {at} ({prefix} bytes landed)"
                ));
                AppendPlan::Fail {
                    prefix,
                    error: io::Error::from_raw_os_error(code),
                }
            }
            DiskFault::TornWrite => {
                let zeros = state.rng.gen_bool(0.5);
                let mut stored = data[..prefix].to_vec();
                stored.extend((prefix..data.len()).map(|_| {
                    if zeros {
                        0
                    } else {
                        state.rng.gen::<u8>()
                    }
                }));
                state.events.push(format!(
                    "{host} disk: torn write of {at}: {prefix} bytes stored, then {}",
                    if zeros { "zeros" } else { "garbage" }
                ));
                AppendPlan::Store(stored)
            }
            DiskFault::LostWrite => {
                state.lost.push(LostRange {
                    path: path.to_path_buf(),
                    pos: size,
                    len: data.len() as u64,
                });
                state.events.push(format!(
                    "{host} disk: lost write of {at} (reported done; gone at a power loss)"
                ));
                AppendPlan::Lost
            }
            DiskFault::MisdirectedWrite => {
                let landing = landing_place(storage, path, data.len() as u64, &mut state.rng);
                state.events.push(match &landing {
                    Some((file, pos)) => format!(
                        "{host} disk: misdirected write of {at}: zeros there, the bytes landed on {} at byte {pos}",
                        file.display()
                    ),
                    None => format!(
                        "{host} disk: misdirected write of {at}: zeros there, the bytes landed nowhere"
                    ),
                });
                AppendPlan::Misdirect(landing)
            }
            DiskFault::ReadErrors | DiskFault::FailedFsync => {
                unreachable!("not an append fault")
            }
        }
    }

    fn read_fails(&self, path: &Path) -> bool {
        let mut state = self.lock();
        let failed = self.strike(&mut state, path, Op::Read).is_some();
        if failed && state.unreadable.insert(path.to_path_buf()) {
            let event = format!("{} disk: EIO reading {}", self.host, path.display());
            state.events.push(event);
        }
        failed
    }

    fn sync_fails(&self, path: &Path) -> bool {
        let mut state = self.lock();
        let failed = self.strike(&mut state, path, Op::Sync).is_some();
        if failed {
            let event = format!(
                "{} disk: fsync of {} failed (EIO)",
                self.host,
                path.display()
            );
            state.events.push(event);
        }
        failed
    }

    /// A truncation: lost bytes cut off are no longer the lost write's.
    fn truncated(&self, path: &Path, len: u64) {
        let mut state = self.lock();
        state.lost.retain_mut(|range| {
            if range.path != path || range.pos + range.len <= len {
                return true;
            }
            range.len = len.saturating_sub(range.pos);
            range.len > 0
        });
    }

    fn renamed(&self, from: &Path, to: &Path) {
        let mut state = self.lock();
        for range in &mut state.lost {
            if let Ok(rest) = range.path.strip_prefix(from) {
                range.path = to.join(rest);
            }
        }
    }

    fn removed(&self, path: &Path) {
        self.lock()
            .lost
            .retain(|range| !range.path.starts_with(path));
    }
}

/// The operations a fault can strike.
#[derive(Debug, Clone, Copy)]
enum Op {
    Append,
    Read,
    Sync,
}

impl Op {
    fn struck_by(self, fault: DiskFault) -> bool {
        match self {
            Op::Append => matches!(
                fault,
                DiskFault::Full
                    | DiskFault::WriteErrors
                    | DiskFault::TornWrite
                    | DiskFault::MisdirectedWrite
                    | DiskFault::LostWrite
            ),
            Op::Read => fault == DiskFault::ReadErrors,
            Op::Sync => fault == DiskFault::FailedFsync,
        }
    }
}

fn is_segment(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(SEGMENT_SUFFIX))
}

fn file_size(storage: &MemStorage, path: &Path) -> Option<u64> {
    storage
        .open_file(path, OpenMode::Existing)
        .and_then(|f| f.size())
        .ok()
}

/// Where a misdirected write of `len` bytes to `path` lands: a random place, within a segment
/// file of the same partition directory, where it fits.
fn landing_place(
    storage: &MemStorage,
    path: &Path,
    len: u64,
    rng: &mut StdRng,
) -> Option<(PathBuf, u64)> {
    let dir = path.parent()?;
    if dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(QUARANTINE_SUFFIX))
    {
        return None;
    }
    let candidates: Vec<(PathBuf, u64)> = storage
        .list_dir(dir)
        .ok()?
        .into_iter()
        .filter(|e| !e.is_dir && e.name.ends_with(SEGMENT_SUFFIX))
        .filter_map(|e| {
            let file = dir.join(&e.name);
            let size = file_size(storage, &file)?;
            (size >= len && len > 0).then_some((file, size))
        })
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let (file, size) = candidates[rng.gen_range(0..candidates.len())].clone();
    let pos = rng.gen_range(0..=size - len);
    Some((file, pos))
}

/// `MemStorage` with fsync latency accounted to a debt counter, and the disk's faults.
#[derive(Debug, Clone)]
pub struct SlowDisk {
    inner: Arc<MemStorage>,
    latency_us: u64,
    debt_us: Arc<AtomicU64>,
    faults: Arc<DiskFaults>,
}

impl SlowDisk {
    pub fn new(
        inner: Arc<MemStorage>,
        latency_us: u64,
        debt_us: Arc<AtomicU64>,
        faults: Arc<DiskFaults>,
    ) -> SlowDisk {
        SlowDisk {
            inner,
            latency_us,
            debt_us,
            faults,
        }
    }

    fn fsynced(&self) {
        self.debt_us.fetch_add(self.latency_us, Ordering::SeqCst);
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(EIO)
}

impl Storage for SlowDisk {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner.exists(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)?;
        self.faults.removed(path);
        Ok(())
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir_all(path)?;
        self.faults.removed(path);
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)?;
        self.faults.removed(to);
        self.faults.renamed(from, to);
        Ok(())
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.fsynced();
        if self.faults.sync_fails(path) {
            // The directory's new entries stay in memory only.
            return Err(eio());
        }
        self.inner.sync_dir(path)
    }
    fn open_file(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let file = self.inner.open_file(path, mode)?;
        Ok(Box::new(SlowFile {
            inner: file,
            path: path.to_path_buf(),
            disk: self.clone(),
        }))
    }
    fn lock_dir(&self, path: &Path) -> io::Result<DirLock> {
        self.inner.lock_dir(path)
    }
}

/// A file of a [`SlowDisk`].
#[derive(Debug)]
struct SlowFile {
    inner: Box<dyn StorageFile>,
    /// The path it was opened by (the faults are scoped by path).
    path: PathBuf,
    disk: SlowDisk,
}

impl StorageFile for SlowFile {
    fn read_at(&self, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        if self.disk.faults.read_fails(&self.path) {
            return Err(eio());
        }
        self.inner.read_at(pos, buf)
    }
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let size = self.inner.size()?;
        let faults = self.disk.faults.clone();
        match faults.plan_append(&self.disk.inner, &self.path, size, data) {
            AppendPlan::Write | AppendPlan::Lost => self.inner.append(data),
            AppendPlan::Fail { prefix, error } => {
                if prefix > 0 {
                    self.inner.append(&data[..prefix])?;
                }
                Err(error)
            }
            AppendPlan::Store(stored) => self.inner.append(&stored),
            AppendPlan::Misdirect(landing) => {
                self.inner.append(&vec![0u8; data.len()])?;
                if let Some((file, pos)) = landing {
                    // The landing place is chosen within a file's current length: it fits.
                    let _ = self.disk.inner.overwrite(&file, pos, data);
                }
                Ok(())
            }
        }
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)?;
        self.disk.faults.truncated(&self.path, len);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        self.disk.fsynced();
        if self.disk.faults.sync_fails(&self.path) {
            // fsyncgate: the dirty pages are dropped — the unsynced bytes read back as zeros
            // (what the disk holds there) — and the error is reported once.
            let unsynced = self.disk.inner.unsynced_bytes(&self.path).unwrap_or(0);
            let size = self.inner.size()?;
            if unsynced > 0 {
                let zeros = vec![0u8; usize::try_from(unsynced).unwrap_or(0)];
                let _ = self
                    .disk
                    .inner
                    .overwrite(&self.path, size - unsynced, &zeros);
            }
            return Err(eio());
        }
        self.inner.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk() -> (Arc<MemStorage>, Arc<DiskFaults>, SlowDisk) {
        let storage = Arc::new(MemStorage::new());
        storage.create_dir_all(Path::new("/data/b1/t-0")).unwrap();
        storage.create_dir_all(Path::new("/data/b1-1/u-0")).unwrap();
        for dir in [
            "/",
            "/data",
            "/data/b1",
            "/data/b1/t-0",
            "/data/b1-1",
            "/data/b1-1/u-0",
        ] {
            storage.sync_dir(Path::new(dir)).unwrap();
        }
        let faults = Arc::new(DiskFaults::new("b1", 7));
        let slow = SlowDisk::new(
            storage.clone(),
            0,
            Arc::new(AtomicU64::new(0)),
            faults.clone(),
        );
        (storage, faults, slow)
    }

    fn open(disk: &SlowDisk, path: &str) -> Box<dyn StorageFile> {
        disk.open_file(Path::new(path), OpenMode::CreateOrOpen)
            .unwrap()
    }

    fn contents(storage: &MemStorage, path: &str) -> Vec<u8> {
        storage
            .open_file(Path::new(path), OpenMode::Existing)
            .unwrap()
            .read_all()
            .unwrap()
    }

    const SEG: &str = "/data/b1/t-0/00000000000000000000.log";

    // A full log directory refuses appends with ENOSPC (a prefix may land) until healed; a
    // directory outside its scope (the second log directory) is not affected.
    #[test]
    fn a_full_disk_refuses_appends_in_its_scope_until_healed() {
        let (storage, faults, disk) = disk();
        faults.add(Path::new("/data/b1"), DiskFault::Full);
        let mut file = open(&disk, SEG);
        let error = file.append(&[7u8; 100]).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(ENOSPC));
        assert!(contents(&storage, SEG).len() < 100);
        assert!(file.append(b"more").is_err(), "still full");
        open(&disk, "/data/b1-1/u-0/00000000000000000000.log")
            .append(b"other dir")
            .unwrap();
        faults.heal();
        let before = contents(&storage, SEG).len();
        file.append(b"after").unwrap();
        assert_eq!(contents(&storage, SEG).len(), before + 5);
        assert!(faults.rules().is_empty());
    }

    // fsyncgate: the failed fsync reports EIO once and the unsynced bytes read back as zeros;
    // the next fsync succeeds.
    #[test]
    fn a_failed_fsync_drops_the_unsynced_data_once() {
        let (storage, faults, disk) = disk();
        let mut file = open(&disk, SEG);
        file.append(b"synced").unwrap();
        file.sync().unwrap();
        file.append(b"dirty").unwrap();
        faults.add(Path::new("/data/b1"), DiskFault::FailedFsync);
        assert_eq!(file.sync().unwrap_err().raw_os_error(), Some(EIO));
        assert_eq!(contents(&storage, SEG), b"synced\0\0\0\0\0");
        file.sync().unwrap();
        assert!(faults.rules().is_empty());
    }

    // A torn write reports success but stores only a prefix of the bytes; a lying fault
    // strikes segment files only (a checkpoint written first is untouched).
    #[test]
    fn a_torn_write_stores_other_bytes_and_reports_success() {
        let (storage, faults, disk) = disk();
        faults.add(Path::new("/data/b1"), DiskFault::TornWrite);
        open(&disk, "/data/b1/recovery-point-offset-checkpoint")
            .append(b"0\n1\n")
            .unwrap();
        assert_eq!(
            contents(&storage, "/data/b1/recovery-point-offset-checkpoint"),
            b"0\n1\n"
        );
        let data = [0xAAu8; 64];
        open(&disk, SEG).append(&data).unwrap();
        let stored = contents(&storage, SEG);
        assert_eq!(stored.len(), 64);
        assert_ne!(stored, data);
        assert_eq!(faults.struck(), 1);
    }

    // A lost write reads back until a power loss, then as zeros, though it was fsynced.
    #[test]
    fn a_lost_write_is_zeros_after_a_power_loss() {
        let (storage, faults, disk) = disk();
        let mut file = open(&disk, SEG);
        disk.sync_dir(Path::new("/data/b1/t-0")).unwrap();
        file.append(b"kept-").unwrap();
        faults.add(Path::new("/data/b1"), DiskFault::LostWrite);
        file.append(b"lost").unwrap();
        file.append(b"-kept").unwrap();
        file.sync().unwrap();
        assert_eq!(contents(&storage, SEG), b"kept-lost-kept");
        faults.power_loss(&storage);
        storage.crash();
        assert_eq!(contents(&storage, SEG), b"kept-\0\0\0\0-kept");
    }

    // A lost write cut off by a truncation is forgotten: bytes written there later are new.
    #[test]
    fn a_truncation_ends_a_lost_write() {
        let (storage, faults, disk) = disk();
        let mut file = open(&disk, SEG);
        disk.sync_dir(Path::new("/data/b1/t-0")).unwrap();
        file.append(b"kept-").unwrap();
        faults.add(Path::new("/data/b1"), DiskFault::LostWrite);
        file.append(b"lost").unwrap();
        file.truncate(5).unwrap();
        file.append(b"anew").unwrap();
        file.sync().unwrap();
        faults.power_loss(&storage);
        storage.crash();
        assert_eq!(contents(&storage, SEG), b"kept-anew");
    }

    // A misdirected write leaves zeros where it was meant to go and its bytes over other data
    // of the partition.
    #[test]
    fn a_misdirected_write_lands_elsewhere() {
        let (storage, faults, disk) = disk();
        let mut file = open(&disk, SEG);
        file.append(&[1u8; 32]).unwrap();
        faults.add(Path::new("/data/b1"), DiskFault::MisdirectedWrite);
        file.append(&[9u8; 8]).unwrap();
        let stored = contents(&storage, SEG);
        assert_eq!(&stored[32..], &[0u8; 8]);
        assert_eq!(stored.iter().filter(|b| **b == 9).count(), 8);
    }

    // Read errors fail every read in the scope until healed.
    #[test]
    fn read_errors_last_until_healed() {
        let (_storage, faults, disk) = disk();
        let mut file = open(&disk, SEG);
        file.append(b"data").unwrap();
        faults.add(Path::new("/data/b1"), DiskFault::ReadErrors);
        let mut buf = [0u8; 4];
        assert_eq!(
            file.read_at(0, &mut buf).unwrap_err().raw_os_error(),
            Some(EIO)
        );
        assert!(file.read_at(0, &mut buf).is_err());
        faults.heal();
        assert_eq!(file.read_at(0, &mut buf).unwrap(), 4);
    }

    // The same seed makes the same choices.
    #[test]
    fn faults_replay_with_the_seed() {
        let run = || {
            let (storage, faults, disk) = disk();
            let mut file = open(&disk, SEG);
            file.append(&[5u8; 200]).unwrap();
            faults.add(Path::new("/data/b1"), DiskFault::TornWrite);
            file.append(&[6u8; 200]).unwrap();
            faults.add(Path::new("/data/b1"), DiskFault::MisdirectedWrite);
            file.append(&[7u8; 20]).unwrap();
            (contents(&storage, SEG), faults.take_events())
        };
        assert_eq!(run(), run());
    }
}
