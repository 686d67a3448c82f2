//! The clean-shutdown file `.kafka_cleanshutdown` (KIP-966): `{"version":0,"brokerEpoch":N}`.
//! Written and fsynced last on an orderly shutdown; read and removed (durably) first at startup,
//! so a crash while loading counts as unclean.

use serde::{Deserialize, Serialize};

use super::LogDir;
use crate::error::LogError;
use crate::storage::{read_file_if_exists, write_file_atomically};

/// File name of the clean-shutdown marker.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// The marker's JSON body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CleanShutdownFile {
    version: i32,
    broker_epoch: i64,
}

/// The only marker version.
const CLEAN_SHUTDOWN_VERSION: i32 = 0;

impl LogDir {
    /// At startup: returns the broker epoch of the last orderly shutdown if the marker exists,
    /// then removes it and fsyncs the directory. `None` means the last shutdown was unclean.
    /// A marker that cannot be parsed is treated as absent (unclean: the safe reading) and
    /// removed too, with a warning.
    pub fn read_and_remove_clean_shutdown(&self) -> Result<Option<i64>, LogError> {
        let path = self.path.join(CLEAN_SHUTDOWN_FILE);
        let Some(bytes) = read_file_if_exists(self.storage.as_ref(), &path)
            .map_err(LogError::io("read", &path))?
        else {
            return Ok(None);
        };
        let broker_epoch = match serde_json::from_slice::<CleanShutdownFile>(&bytes) {
            Ok(file) if file.version == CLEAN_SHUTDOWN_VERSION => Some(file.broker_epoch),
            Ok(file) => {
                tracing::warn!(path = %path.display(), version = file.version,
                    "unknown clean-shutdown file version; treating the shutdown as unclean");
                None
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error,
                    "unreadable clean-shutdown file; treating the shutdown as unclean");
                None
            }
        };
        self.storage
            .remove_file(&path)
            .map_err(LogError::io("remove", &path))?;
        self.storage
            .sync_dir(&self.path)
            .map_err(LogError::io("fsync directory", &self.path))?;
        Ok(broker_epoch)
    }

    /// On orderly shutdown, after every log is closed and checkpointed: durably writes the
    /// marker holding `broker_epoch`.
    pub fn write_clean_shutdown(&self, broker_epoch: i64) -> Result<(), LogError> {
        let path = self.path.join(CLEAN_SHUTDOWN_FILE);
        let body = CleanShutdownFile {
            version: CLEAN_SHUTDOWN_VERSION,
            broker_epoch,
        };
        let json = serde_json::to_vec(&body).expect("a plain struct serializes");
        write_file_atomically(self.storage.as_ref(), &path, &json)
            .map_err(LogError::io("write", &path))
    }
}
