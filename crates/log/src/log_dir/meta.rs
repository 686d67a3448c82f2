//! `meta.properties`: which cluster and node a log directory belongs to, and its directory id.
//! Kafka's Java-properties format, version 1:
//!
//! ```text
//! #Written by Keel
//! version=1
//! cluster.id=MkU3OEVBNTcwNTJENDM2Qg
//! node.id=1
//! directory.id=J8aAPcfLQt2bqs1JT_rMgQ
//! ```
//!
//! `directory.id` uses Kafka's `Uuid.toString()` form: the 16 bytes in URL-safe base64 without
//! padding (22 characters). A plain hyphenated UUID is accepted on read too.

use std::collections::BTreeMap;
use std::path::Path;

use uuid::Uuid;

use crate::error::LogError;

/// File name of the log directory identity file.
pub const META_PROPERTIES_FILE: &str = "meta.properties";

/// The `version` written (KRaft mode).
pub const META_PROPERTIES_VERSION: u32 = 1;

/// The contents of `meta.properties`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    /// `cluster.id`.
    pub cluster_id: String,
    /// `node.id`.
    pub node_id: i32,
    /// `directory.id`: random per directory, so a replaced disk shows up as a new id.
    pub directory_id: Uuid,
}

impl MetaProperties {
    /// The file text.
    pub fn to_text(&self) -> String {
        format!(
            "#Written by Keel\nversion={META_PROPERTIES_VERSION}\ncluster.id={}\nnode.id={}\ndirectory.id={}\n",
            self.cluster_id,
            self.node_id,
            encode_kafka_uuid(self.directory_id)
        )
    }

    /// Parses the file text; `path` is only used in errors.
    pub fn parse(path: &Path, text: &str) -> Result<MetaProperties, LogError> {
        let corrupt = |reason: String| LogError::CorruptFile {
            path: path.to_path_buf(),
            reason,
        };
        let mut props = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| corrupt(format!("line {line:?} is not key=value")))?;
            props.insert(key.trim(), value.trim());
        }
        let get = |key: &str| {
            props
                .get(key)
                .copied()
                .ok_or_else(|| corrupt(format!("missing {key}")))
        };
        let version = get("version")?;
        if version != META_PROPERTIES_VERSION.to_string() {
            return Err(corrupt(format!("unsupported version {version}")));
        }
        let cluster_id = get("cluster.id")?.to_string();
        let node_id = get("node.id")?
            .parse()
            .map_err(|_| corrupt("node.id is not an integer".to_string()))?;
        let directory_id = get("directory.id")?;
        let directory_id = decode_kafka_uuid(directory_id)
            .ok_or_else(|| corrupt(format!("bad directory.id {directory_id:?}")))?;
        Ok(MetaProperties {
            cluster_id,
            node_id,
            directory_id,
        })
    }
}

const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Kafka's `Uuid.toString()`: URL-safe base64 of the 16 bytes, without padding.
pub fn encode_kafka_uuid(uuid: Uuid) -> String {
    let bytes = uuid.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let mut n = 0u32;
        for (i, b) in chunk.iter().enumerate() {
            n |= u32::from(*b) << (16 - 8 * i);
        }
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(BASE64_URL[((n >> (18 - 6 * i)) & 0x3F) as usize] as char);
        }
    }
    out
}

/// Inverse of [`encode_kafka_uuid`]; also accepts a hyphenated UUID.
pub fn decode_kafka_uuid(text: &str) -> Option<Uuid> {
    if text.len() != 22 {
        return Uuid::parse_str(text).ok();
    }
    let mut bits = 0u32;
    let mut nbits = 0;
    let mut bytes = Vec::with_capacity(16);
    for c in text.bytes() {
        let v = BASE64_URL.iter().position(|&b| b == c)? as u32;
        bits = (bits << 6) | v;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            bytes.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    if bits != 0 {
        return None; // non-canonical trailing bits
    }
    Uuid::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Kafka's base64 form: 22 URL-safe characters, round-tripping every byte pattern.
    #[test]
    fn kafka_uuid_round_trip() {
        let uuid = Uuid::from_bytes([
            0x27, 0xc6, 0x80, 0x3d, 0xc7, 0xcb, 0x42, 0xdd, 0x9b, 0xaa, 0xcd, 0x49, 0x4f, 0xfa,
            0xcc, 0x81,
        ]);
        assert_eq!(encode_kafka_uuid(uuid), "J8aAPcfLQt2bqs1JT_rMgQ");
        assert_eq!(decode_kafka_uuid("J8aAPcfLQt2bqs1JT_rMgQ"), Some(uuid));
        assert_eq!(decode_kafka_uuid(&uuid.to_string()), Some(uuid));
        for seed in 0..=255u8 {
            let uuid = Uuid::from_bytes([seed.wrapping_mul(37); 16]);
            assert_eq!(decode_kafka_uuid(&encode_kafka_uuid(uuid)), Some(uuid));
        }
        assert_eq!(decode_kafka_uuid("J8aAPcfLQt2bqs1JT_rMg!"), None);
    }

    // The properties text round-trips and tolerates comments and Kafka's key order.
    #[test]
    fn meta_properties_round_trip() {
        let meta = MetaProperties {
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qg".into(),
            node_id: 3,
            directory_id: Uuid::from_bytes([7; 16]),
        };
        let path = Path::new("/d/meta.properties");
        assert_eq!(MetaProperties::parse(path, &meta.to_text()).unwrap(), meta);
        let kafka = format!(
            "#\n#Thu Jan 01 00:00:00 UTC 2025\nnode.id=3\ndirectory.id={}\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\n",
            encode_kafka_uuid(meta.directory_id)
        );
        assert_eq!(MetaProperties::parse(path, &kafka).unwrap(), meta);
        assert!(MetaProperties::parse(path, "version=0\ncluster.id=x\nnode.id=1\n").is_err());
        assert!(MetaProperties::parse(path, "version=1\nnode.id=1\n").is_err());
    }
}
