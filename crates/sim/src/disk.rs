//! A host's disk as its processes see it: `MemStorage` (whose crash drops every unsynced
//! write) plus fsync latency. The storage interface is synchronous, so an fsync cannot yield
//! simulated time by itself; instead every fsync (of a file or a directory) adds its latency
//! to the host's *IO debt*, and the world then keeps the host blocked — not stepped, like a
//! process stuck in `fsync(2)` — for that long before it runs again (its clock jumps and its
//! overdue timers fire, as after a pause).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_log::storage::{DirEntry, DirLock, MemStorage, OpenMode, Storage, StorageFile};

/// `MemStorage` with fsync latency accounted to a debt counter.
#[derive(Debug, Clone)]
pub struct SlowDisk {
    inner: Arc<MemStorage>,
    latency_us: u64,
    debt_us: Arc<AtomicU64>,
}

impl SlowDisk {
    pub fn new(inner: Arc<MemStorage>, latency_us: u64, debt_us: Arc<AtomicU64>) -> SlowDisk {
        SlowDisk {
            inner,
            latency_us,
            debt_us,
        }
    }

    fn fsynced(&self) {
        self.debt_us.fetch_add(self.latency_us, Ordering::SeqCst);
    }
}

impl Storage for SlowDisk {
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<DirEntry>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> std::io::Result<bool> {
        self.inner.exists(path)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove_dir_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        self.fsynced();
        self.inner.sync_dir(path)
    }
    fn open_file(&self, path: &Path, mode: OpenMode) -> std::io::Result<Box<dyn StorageFile>> {
        let file = self.inner.open_file(path, mode)?;
        Ok(Box::new(SlowFile {
            inner: file,
            disk: self.clone(),
        }))
    }
    fn lock_dir(&self, path: &Path) -> std::io::Result<DirLock> {
        self.inner.lock_dir(path)
    }
}

/// A file of a [`SlowDisk`].
#[derive(Debug)]
struct SlowFile {
    inner: Box<dyn StorageFile>,
    disk: SlowDisk,
}

impl StorageFile for SlowFile {
    fn read_at(&self, pos: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read_at(pos, buf)
    }
    fn append(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.inner.append(data)
    }
    fn size(&self) -> std::io::Result<u64> {
        self.inner.size()
    }
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.inner.truncate(len)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.disk.fsynced();
        self.inner.sync()
    }
}
