//! The storage interface: every byte the log reads or writes goes through [`Storage`] and
//! [`StorageFile`], so that a deterministic simulator can substitute a disk that loses unsynced
//! data on a crash.
//!
//! Two implementations live here: [`OsStorage`] (the real file system) and [`MemStorage`] (an
//! in-memory file system that tracks durability, for tests and the simulator). The helpers
//! [`write_file_atomically`] and [`create_dir_all_durable`] encode the fsync discipline the rest
//! of the crate relies on.
//!
//! Files are append-only: there is no positional write. Data reaches a file by `append`, and
//! leaves it by `truncate`.

mod mem;
mod os;

pub use mem::MemStorage;
pub use os::OsStorage;

use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirEntry {
    /// The file or directory name (not a path).
    pub name: String,
    /// Whether the entry is a directory.
    pub is_dir: bool,
}

/// How [`Storage::open_file`] treats a missing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Fail with `NotFound` if the file does not exist.
    Existing,
    /// Create an empty file if it does not exist; keep the contents if it does.
    CreateOrOpen,
}

/// A file system, as far as the log needs one. Object safe; used as `Arc<dyn Storage>`.
///
/// Durability contract (what [`MemStorage`] simulates and what the log relies on):
/// - bytes appended to a file survive a crash only once [`StorageFile::sync`] returned;
/// - creating, renaming or removing a directory entry survives a crash only once
///   [`Storage::sync_dir`] of the parent directory returned;
/// - [`Storage::rename`] is atomic: after a crash the target holds either the old or the new file.
pub trait Storage: Send + Sync + Debug {
    /// Creates `path` and any missing parents (like `mkdir -p`).
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Lists a directory, sorted by name.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes a directory and everything below it.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Atomically renames `from` to `to`, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the entries of directory `path` durable (fsync of the directory).
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Opens a file for positional reads, appends, truncation and fsync.
    fn open_file(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>>;
    /// Takes the exclusive lock of directory `path` (Kafka's `.lock` file), held until the
    /// returned guard is dropped; fails with `WouldBlock` if another process holds it.
    fn lock_dir(&self, path: &Path) -> io::Result<DirLock>;
    /// The size of the volume holding `path` and the bytes still usable on it
    /// (DescribeLogDirs' `TotalBytes`/`UsableBytes`); `None` when the storage cannot tell.
    fn space(&self, path: &Path) -> io::Result<Option<VolumeSpace>> {
        let _ = path;
        Ok(None)
    }
}

/// What [`Storage::space`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeSpace {
    /// The volume's size in bytes.
    pub total_bytes: u64,
    /// Bytes an unprivileged writer can still use.
    pub usable_bytes: u64,
}

/// A held directory lock; dropping it releases the lock.
#[derive(Debug)]
pub struct DirLock {
    _held: Option<std::fs::File>,
}

impl DirLock {
    /// A lock that holds nothing (storage with a single user, such as [`MemStorage`]).
    pub fn none() -> DirLock {
        DirLock { _held: None }
    }

    /// A lock held through an open, locked file.
    pub fn file(file: std::fs::File) -> DirLock {
        DirLock { _held: Some(file) }
    }
}

/// Name of the lock file in a log directory (Kafka's).
pub const LOCK_FILE: &str = ".lock";

/// An open file. Reads take `&self` so readers can share a file with the single appender.
pub trait StorageFile: Send + Sync + Debug {
    /// Reads up to `buf.len()` bytes at `pos`; returns how many were read (0 at end of file).
    fn read_at(&self, pos: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Appends `data` at the end of the file.
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// The current length of the file in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Shortens the file to `len` bytes (`len` must not exceed the current size).
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Makes the file's contents durable (fsync).
    fn sync(&mut self) -> io::Result<()>;

    /// Reads exactly `buf.len()` bytes at `pos`, failing with `UnexpectedEof` if the file is
    /// shorter.
    fn read_exact_at(&self, mut pos: u64, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.read_at(pos, buf)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past end of file",
                ));
            }
            pos += n as u64;
            buf = &mut buf[n..];
        }
        Ok(())
    }

    /// Appends exactly `len` bytes read at `pos` to `out`, failing with `UnexpectedEof` (and
    /// leaving `out` as it was) if the file is shorter. The hot read path (fetches); an
    /// implementation may read straight into `out`'s spare capacity instead of zeroing it first.
    fn read_to_vec_at(&self, pos: u64, len: usize, out: &mut Vec<u8>) -> io::Result<()> {
        let start = out.len();
        out.resize(start + len, 0);
        let read = self.read_exact_at(pos, &mut out[start..]);
        if read.is_err() {
            out.truncate(start);
        }
        read
    }

    /// Reads the whole file.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let size = usize::try_from(self.size()?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        let mut buf = vec![0u8; size];
        self.read_exact_at(0, &mut buf)?;
        Ok(buf)
    }
}

/// The suffix of the temporary file [`write_file_atomically`] writes before renaming.
pub const TEMP_FILE_SUFFIX: &str = ".tmp";

/// Replaces `path` with `bytes` so that after a crash the file holds either its old contents or
/// exactly `bytes`: writes `<path>.tmp`, fsyncs it, renames it over `path`, fsyncs the parent.
pub fn write_file_atomically(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let parent = parent_of(path)?;
    let temp = temp_path(path);
    let mut file = storage.open_file(&temp, OpenMode::CreateOrOpen)?;
    file.truncate(0)?;
    file.append(bytes)?;
    file.sync()?;
    drop(file);
    storage.rename(&temp, path)?;
    storage.sync_dir(&parent)
}

/// Reads a whole file, or `None` if it does not exist.
pub fn read_file_if_exists(storage: &dyn Storage, path: &Path) -> io::Result<Option<Vec<u8>>> {
    match storage.open_file(path, OpenMode::Existing) {
        Ok(file) => file.read_all().map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates `path` (and parents) and fsyncs it and every ancestor, so the directory itself
/// survives a crash.
pub fn create_dir_all_durable(storage: &dyn Storage, path: &Path) -> io::Result<()> {
    storage.create_dir_all(path)?;
    storage.sync_dir(path)?;
    for ancestor in path.ancestors().skip(1) {
        if ancestor.as_os_str().is_empty() {
            break;
        }
        storage.sync_dir(ancestor)?;
    }
    Ok(())
}

/// The temporary path [`write_file_atomically`] uses for `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(TEMP_FILE_SUFFIX);
    PathBuf::from(name)
}

/// The parent directory of `path` (`.` for a bare relative file name).
pub fn parent_of(path: &Path) -> io::Result<PathBuf> {
    match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Ok(PathBuf::from(".")),
        Some(p) => Ok(p.to_path_buf()),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no parent directory", path.display()),
        )),
    }
}

#[cfg(test)]
mod tests;
