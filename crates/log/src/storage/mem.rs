//! [`MemStorage`]: an in-memory file system that knows what is durable, so tests and the
//! simulator can crash it.
//!
//! The model is a tiny inode file system:
//! - a **file** holds its bytes and `synced_len`, the length of the prefix made durable by the
//!   last [`StorageFile::sync`]. Files are append-only, so the durable contents are always a
//!   prefix of the current contents. `truncate` below `synced_len` lowers `synced_len`
//!   (truncation is treated as immediately durable: a crash never resurrects truncated bytes);
//! - a **directory** holds its current entries and its durable entries, the entries as of the
//!   last [`Storage::sync_dir`] of that directory. Creating, renaming and removing entries change
//!   only the current entries. The root directory always exists.
//!
//! [`MemStorage::crash`] keeps exactly what is durable: starting from the root it follows durable
//! entries only, resets every reachable directory's entries to its durable entries, cuts every
//! reachable file to its `synced_len`, and forgets unreachable inodes. A file whose data was
//! fsynced but whose directory entry was never made durable disappears; a file removed without a
//! directory fsync comes back. [`MemStorage::crash_with_torn_tails`] is the same except that each
//! file keeps a pseudo-random prefix (possibly empty, possibly all) of its unsynced tail, drawn
//! from the given seed — a torn write. Handles opened before a crash fail with an error afterwards.
//!
//! Removed files are forgotten once no current or durable directory entry reaches them; unlike
//! POSIX, a handle still open on such a file then fails (the log closes files before removing
//! them).
//!
//! Paths are resolved from a single root: `RootDir` and `.` components are ignored (a relative
//! path means the same as the absolute one) and `..` is rejected.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{DirEntry, OpenMode, Storage, StorageFile};

type InodeId = u64;

const ROOT: InodeId = 0;

/// An in-memory, crashable [`Storage`]. Clones share the same file system.
#[derive(Debug, Clone)]
pub struct MemStorage {
    state: Arc<Mutex<MemState>>,
}

#[derive(Debug)]
struct MemState {
    inodes: BTreeMap<InodeId, Inode>,
    next_inode: InodeId,
    /// Bumped by every crash; handles from an older generation are dead.
    generation: u64,
}

#[derive(Debug)]
enum Inode {
    Dir {
        entries: BTreeMap<String, InodeId>,
        durable_entries: BTreeMap<String, InodeId>,
    },
    File {
        data: Vec<u8>,
        synced_len: usize,
    },
}

impl Default for MemStorage {
    fn default() -> Self {
        MemStorage::new()
    }
}

impl MemStorage {
    /// An empty file system holding only the root directory.
    pub fn new() -> MemStorage {
        let mut inodes = BTreeMap::new();
        inodes.insert(ROOT, Inode::empty_dir());
        MemStorage {
            state: Arc::new(Mutex::new(MemState {
                inodes,
                next_inode: ROOT + 1,
                generation: 0,
            })),
        }
    }

    /// Simulates a power loss: drops every byte and directory entry that was not made durable.
    /// See the module docs for the exact rules.
    pub fn crash(&self) {
        self.lock().crash(None);
    }

    /// Like [`MemStorage::crash`], but every file keeps a prefix of its unsynced tail whose
    /// length is drawn from `seed` (deterministically, per file).
    pub fn crash_with_torn_tails(&self, seed: u64) {
        self.lock().crash(Some(seed));
    }

    /// Flips every bit of the byte at `pos` in the file at `path` (durable or not): bit rot.
    pub fn corrupt_byte(&self, path: &Path, pos: u64) -> io::Result<()> {
        let mut state = self.lock();
        let id = state.resolve(path)?;
        let (data, _) = state.file_mut(id)?;
        let index = usize::try_from(pos).ok().filter(|&i| i < data.len());
        let index = index.ok_or_else(|| invalid_input(format!("no byte {pos} in file")))?;
        data[index] ^= 0xFF;
        Ok(())
    }

    /// Overwrites the bytes of the file at `path` from `pos` on with `bytes`, in place and
    /// durable or not, like [`MemStorage::corrupt_byte`]: what a lying disk does (a misdirected
    /// write landing on other data, a lost write reading back as zeros after a power loss).
    /// The range must lie within the file.
    pub fn overwrite(&self, path: &Path, pos: u64, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.lock();
        let id = state.resolve(path)?;
        let (data, _) = state.file_mut(id)?;
        let range = usize::try_from(pos)
            .ok()
            .and_then(|start| Some(start..start.checked_add(bytes.len())?))
            .filter(|range| range.end <= data.len());
        let range = range.ok_or_else(|| {
            invalid_input(format!(
                "bytes {pos}..{pos}+{} are not all in the file",
                bytes.len()
            ))
        })?;
        data[range].copy_from_slice(bytes);
        Ok(())
    }

    /// How many bytes of the file at `path` are not yet durable.
    pub fn unsynced_bytes(&self, path: &Path) -> io::Result<u64> {
        let mut state = self.lock();
        let id = state.resolve(path)?;
        let (data, synced_len) = state.file_mut(id)?;
        Ok((data.len() - *synced_len) as u64)
    }

    fn lock(&self) -> MutexGuard<'_, MemState> {
        // A panic while holding the lock leaves the state consistent enough for tests.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inode {
    fn empty_dir() -> Inode {
        Inode::Dir {
            entries: BTreeMap::new(),
            durable_entries: BTreeMap::new(),
        }
    }
}

fn invalid_input(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

/// The names along `path`, ignoring root and `.` components.
fn names(path: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                return Err(invalid_input(format!("'..' in {}", path.display())));
            }
            Component::Normal(name) => {
                let name = name
                    .to_str()
                    .ok_or_else(|| invalid_input(format!("non UTF-8 path {}", path.display())))?;
                names.push(name.to_string());
            }
        }
    }
    Ok(names)
}

/// A 64-bit mix (SplitMix64 finalizer) used to draw torn-tail lengths from a seed.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl MemState {
    fn alloc(&mut self, inode: Inode) -> InodeId {
        let id = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(id, inode);
        id
    }

    fn entries(&self, dir: InodeId) -> Option<&BTreeMap<String, InodeId>> {
        match self.inodes.get(&dir) {
            Some(Inode::Dir { entries, .. }) => Some(entries),
            _ => None,
        }
    }

    fn entries_mut(&mut self, dir: InodeId) -> io::Result<&mut BTreeMap<String, InodeId>> {
        match self.inodes.get_mut(&dir) {
            Some(Inode::Dir { entries, .. }) => Ok(entries),
            _ => Err(invalid_input("not a directory".to_string())),
        }
    }

    fn is_dir(&self, id: InodeId) -> bool {
        matches!(self.inodes.get(&id), Some(Inode::Dir { .. }))
    }

    fn resolve(&self, path: &Path) -> io::Result<InodeId> {
        let mut current = ROOT;
        for name in names(path)? {
            let entries = self.entries(current).ok_or_else(|| not_found(path))?;
            current = *entries.get(&name).ok_or_else(|| not_found(path))?;
        }
        Ok(current)
    }

    /// The parent directory inode and the final name of `path`.
    fn resolve_parent(&self, path: &Path) -> io::Result<(InodeId, String)> {
        let mut names = names(path)?;
        let last = names
            .pop()
            .ok_or_else(|| invalid_input(format!("{} names no entry", path.display())))?;
        let mut current = ROOT;
        for name in names {
            let entries = self.entries(current).ok_or_else(|| not_found(path))?;
            current = *entries.get(&name).ok_or_else(|| not_found(path))?;
        }
        if !self.is_dir(current) {
            return Err(not_found(path));
        }
        Ok((current, last))
    }

    fn file_mut(&mut self, id: InodeId) -> io::Result<(&mut Vec<u8>, &mut usize)> {
        match self.inodes.get_mut(&id) {
            Some(Inode::File { data, synced_len }) => Ok((data, synced_len)),
            Some(Inode::Dir { .. }) => Err(invalid_input("is a directory".to_string())),
            None => Err(io::Error::other("file no longer exists")),
        }
    }

    /// Forgets inodes that neither the current nor the durable entries can reach (removed files
    /// whose removal is already durable). Handles still open on them fail afterwards.
    fn collect_garbage(&mut self) {
        let mut reachable = BTreeSet::new();
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            if !reachable.insert(id) {
                continue;
            }
            if let Some(Inode::Dir {
                entries,
                durable_entries,
            }) = self.inodes.get(&id)
            {
                stack.extend(entries.values().chain(durable_entries.values()).copied());
            }
        }
        self.inodes.retain(|id, _| reachable.contains(id));
    }

    fn crash(&mut self, torn_seed: Option<u64>) {
        self.generation += 1;
        let mut reachable = BTreeSet::new();
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            if !reachable.insert(id) {
                continue;
            }
            match self.inodes.get_mut(&id) {
                Some(Inode::Dir {
                    entries,
                    durable_entries,
                }) => {
                    *entries = durable_entries.clone();
                    stack.extend(entries.values().copied());
                }
                Some(Inode::File { data, synced_len }) => {
                    let unsynced = data.len() - *synced_len;
                    let kept = match torn_seed {
                        Some(seed) if unsynced > 0 => {
                            (mix(seed ^ mix(id)) % (unsynced as u64 + 1)) as usize
                        }
                        _ => 0,
                    };
                    data.truncate(*synced_len + kept);
                    *synced_len = data.len();
                }
                None => unreachable!("directory entry points to a forgotten inode"),
            }
        }
        self.inodes.retain(|id, _| reachable.contains(id));
    }
}

impl Storage for MemStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let mut current = ROOT;
        for name in names(path)? {
            let existing = state.entries_mut(current)?.get(&name).copied();
            current = match existing {
                Some(id) if state.is_dir(id) => id,
                Some(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{}: a file is in the way", path.display()),
                    ))
                }
                None => {
                    let id = state.alloc(Inode::empty_dir());
                    state.entries_mut(current)?.insert(name, id);
                    id
                }
            };
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let state = self.lock();
        let id = state.resolve(path)?;
        let entries = state
            .entries(id)
            .ok_or_else(|| invalid_input(format!("{} is not a directory", path.display())))?;
        Ok(entries
            .iter()
            .map(|(name, id)| DirEntry {
                name: name.clone(),
                is_dir: state.is_dir(*id),
            })
            .collect())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        match self.lock().resolve(path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let (parent, name) = state.resolve_parent(path)?;
        let id = *state
            .entries_mut(parent)?
            .get(&name)
            .ok_or_else(|| not_found(path))?;
        if state.is_dir(id) {
            return Err(invalid_input(format!("{} is a directory", path.display())));
        }
        state.entries_mut(parent)?.remove(&name);
        state.collect_garbage();
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let (parent, name) = state.resolve_parent(path)?;
        let id = *state
            .entries_mut(parent)?
            .get(&name)
            .ok_or_else(|| not_found(path))?;
        if !state.is_dir(id) {
            return Err(invalid_input(format!(
                "{} is not a directory",
                path.display()
            )));
        }
        state.entries_mut(parent)?.remove(&name);
        state.collect_garbage();
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let (from_parent, from_name) = state.resolve_parent(from)?;
        let (to_parent, to_name) = state.resolve_parent(to)?;
        let id = *state
            .entries_mut(from_parent)?
            .get(&from_name)
            .ok_or_else(|| not_found(from))?;
        if let Some(&target) = state.entries_mut(to_parent)?.get(&to_name) {
            if state.is_dir(target) || state.is_dir(id) {
                return Err(invalid_input(format!(
                    "cannot rename {} over existing {}",
                    from.display(),
                    to.display()
                )));
            }
        }
        state.entries_mut(from_parent)?.remove(&from_name);
        state.entries_mut(to_parent)?.insert(to_name, id);
        state.collect_garbage();
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let id = state.resolve(path)?;
        match state.inodes.get_mut(&id) {
            Some(Inode::Dir {
                entries,
                durable_entries,
            }) => {
                *durable_entries = entries.clone();
                state.collect_garbage();
                Ok(())
            }
            _ => Err(invalid_input(format!(
                "{} is not a directory",
                path.display()
            ))),
        }
    }

    /// One in-memory storage models one process's disk: there is nobody to exclude.
    fn lock_dir(&self, _path: &Path) -> io::Result<super::DirLock> {
        Ok(super::DirLock::none())
    }

    fn open_file(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let mut state = self.lock();
        let inode = match state.resolve(path) {
            Ok(id) if state.is_dir(id) => {
                return Err(invalid_input(format!("{} is a directory", path.display())))
            }
            Ok(id) => id,
            Err(e) if e.kind() == io::ErrorKind::NotFound && mode == OpenMode::CreateOrOpen => {
                let (parent, name) = state.resolve_parent(path)?;
                let id = state.alloc(Inode::File {
                    data: Vec::new(),
                    synced_len: 0,
                });
                state.entries_mut(parent)?.insert(name, id);
                id
            }
            Err(e) => return Err(e),
        };
        Ok(Box::new(MemFile {
            storage: self.clone(),
            inode,
            generation: state.generation,
        }))
    }
}

/// A handle on a [`MemStorage`] file; dead after a crash.
#[derive(Debug)]
struct MemFile {
    storage: MemStorage,
    inode: InodeId,
    generation: u64,
}

impl MemFile {
    fn with<R>(&self, f: impl FnOnce(&mut Vec<u8>, &mut usize) -> io::Result<R>) -> io::Result<R> {
        let mut state = self.storage.lock();
        if state.generation != self.generation {
            return Err(io::Error::other("file handle opened before a crash"));
        }
        let (data, synced_len) = state.file_mut(self.inode)?;
        f(data, synced_len)
    }
}

impl StorageFile for MemFile {
    fn read_at(&self, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.with(|data, _| {
            let start = usize::try_from(pos).unwrap_or(usize::MAX).min(data.len());
            let n = buf.len().min(data.len() - start);
            buf[..n].copy_from_slice(&data[start..start + n]);
            Ok(n)
        })
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.with(|data, _| {
            data.extend_from_slice(bytes);
            Ok(())
        })
    }

    fn size(&self) -> io::Result<u64> {
        self.with(|data, _| Ok(data.len() as u64))
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.with(|data, synced_len| {
            let len = usize::try_from(len)
                .ok()
                .filter(|&l| l <= data.len())
                .ok_or_else(|| invalid_input(format!("cannot grow a file by truncate({len})")))?;
            data.truncate(len);
            *synced_len = (*synced_len).min(len);
            Ok(())
        })
    }

    fn sync(&mut self) -> io::Result<()> {
        self.with(|data, synced_len| {
            *synced_len = data.len();
            Ok(())
        })
    }
}
