//! Content hashes (BLAKE3) used for ids, fingerprints and manifests.
use std::io::Read;
use std::path::Path;

use crate::CoreError;

/// Hex BLAKE3 hash of a file's bytes, streamed.
pub fn file_hash(path: &Path) -> Result<String, CoreError> {
    let mut file = std::fs::File::open(path).map_err(|e| CoreError::io(path, e))?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(|e| CoreError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// Hex BLAKE3 hash of bytes.
pub fn bytes_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Short (16 hex characters, 64 bits) stable id from a list of parts, separated unambiguously.
pub fn short_id(parts: &[&[u8]]) -> String {
    let mut hasher = blake3::Hasher::new();
    for part in parts {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().to_hex()[..16].to_string()
}
