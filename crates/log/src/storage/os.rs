//! [`OsStorage`]: the [`Storage`] trait over `std::fs`, for production.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

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
    fn space(&self, path: &Path) -> io::Result<Option<super::VolumeSpace>> {
        let stat = rustix::fs::statvfs(path)?;
        Ok(Some(super::VolumeSpace {
            total_bytes: stat.f_blocks.saturating_mul(stat.f_frsize),
            usable_bytes: stat.f_bavail.saturating_mul(stat.f_frsize),
        }))
    }

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
        Ok(Box::new(OsFile {
            file,
            size,
            read_cursor: Mutex::new(()),
        }))
    }
}

/// An open file; appends go to the cached end position with positional writes.
#[derive(Debug)]
struct OsFile {
    file: File,
    size: u64,
    /// Held while a read uses the file's cursor (`read_to_vec_at`). Nothing else moves or
    /// reads the cursor: every other read and write is positional.
    read_cursor: Mutex<()>,
}

impl StorageFile for OsFile {
    fn read_at(&self, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read_at(buf, pos)
    }

    /// Seeks and reads through `std`'s `read_to_end`, which reads into the vector's spare
    /// capacity without zeroing it first: a fetch of megabytes would otherwise spend as long
    /// clearing its buffer as the kernel spends filling it (measured by `perf`: docs/benchmarks.md).
    fn read_to_vec_at(&self, pos: u64, len: usize, out: &mut Vec<u8>) -> io::Result<()> {
        let _cursor = self
            .read_cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut file = &self.file;
        file.seek(io::SeekFrom::Start(pos))?;
        let start = out.len();
        out.reserve(len);
        let read = file.take(len as u64).read_to_end(out);
        match read {
            Ok(n) if n == len => Ok(()),
            Ok(_) => {
                out.truncate(start);
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past end of file",
                ))
            }
            Err(e) => {
                out.truncate(start);
                Err(e)
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, Arc<dyn StorageFile>) {
        let dir = tempfile::tempdir().unwrap();
        let storage = OsStorage::new();
        let mut file = storage
            .open_file(&dir.path().join("f.log"), OpenMode::CreateOrOpen)
            .unwrap();
        file.append(bytes).unwrap();
        (dir, Arc::from(file))
    }

    #[test]
    fn read_to_vec_at_appends_exactly_the_range() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let (_dir, file) = file_with(&data);
        let mut out = b"head".to_vec();
        file.read_to_vec_at(1000, 50_000, &mut out).unwrap();
        assert_eq!(&out[..4], b"head");
        assert_eq!(&out[4..], &data[1000..51_000]);
        file.read_to_vec_at(0, 0, &mut out).unwrap();
        assert_eq!(out.len(), 50_004);
        // Past the end: an error, and `out` as it was.
        let error = file.read_to_vec_at(99_000, 2_000, &mut out).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(out.len(), 50_004);
        // Positional reads are not disturbed by the cursor this one moved.
        let mut buf = [0u8; 10];
        file.read_exact_at(5, &mut buf).unwrap();
        assert_eq!(&buf, &data[5..15]);
    }

    #[test]
    fn concurrent_read_to_vec_at_each_get_their_range() {
        let data: Vec<u8> = (0..400_000u32).map(|i| (i % 253) as u8).collect();
        let (_dir, file) = file_with(&data);
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (file, data) = (file.clone(), data.clone());
                std::thread::spawn(move || {
                    for round in 0..200u64 {
                        let pos = (t * 90_000 + round * 97) as usize;
                        let mut out = Vec::new();
                        file.read_to_vec_at(pos as u64, 5_000, &mut out).unwrap();
                        assert_eq!(out, &data[pos..pos + 5_000], "thread {t} round {round}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
