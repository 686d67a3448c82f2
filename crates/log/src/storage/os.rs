//! [`OsStorage`]: the [`Storage`] trait over `std::fs`, for production.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{DirEntry, OpenMode, Storage, StorageFile};

/// The real file system. Stateless; cheap to construct.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsStorage;

impl OsStorage {
    /// Creates the storage handle.
    pub fn new() -> OsStorage {
        OsStorage
    }
}

impl Storage for OsStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(path)? {
            let entry = entry?;
            let name = entry.file_name().into_string().map_err(|name| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("non UTF-8 file name {name:?} in {}", path.display()),
                )
            })?;
            entries.push(DirEntry {
                name,
                is_dir: entry.file_type()?.is_dir(),
            });
        }
        entries.sort();
        Ok(entries)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir_all(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn lock_dir(&self, path: &Path) -> io::Result<super::DirLock> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path.join(super::LOCK_FILE))?;
        match file.try_lock() {
            Ok(()) => Ok(super::DirLock::file(file)),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is locked by another process", path.display()),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn open_file(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(mode == OpenMode::CreateOrOpen)
            .truncate(false)
            .open(path)?;
        let size = file.metadata()?.len();
        Ok(Box::new(OsFile { file, size }))
    }
}

/// An open file; appends go to the cached end position with positional writes.
#[derive(Debug)]
struct OsFile {
    file: File,
    size: u64,
}

impl StorageFile for OsFile {
    fn read_at(&self, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read_at(buf, pos)
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, self.size)?;
        self.size += data.len() as u64;
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.size)
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        if len > self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot truncate a {}-byte file to {len} bytes", self.size),
            ));
        }
        self.file.set_len(len)?;
        self.size = len;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}
