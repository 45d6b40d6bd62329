//! Stable partitions of a chunk table for sharded stages (`embed --shard i/n`,
//! `index --shard i/n`): chunk `c` belongs to shard `u64(BLAKE3(chunk_id)[0..8]) mod n`, so a
//! chunk's shard never depends on the table's order, its size, or the machine.
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Shard `index` of `count` (0-based: `0/4` … `3/4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// Which shard (0-based).
    pub index: usize,
    /// How many shards.
    pub count: usize,
}

impl Shard {
    /// Shard `index` of `count`, checked.
    pub fn new(index: usize, count: usize) -> Result<Shard, String> {
        if count == 0 || index >= count {
            return Err(format!("shard {index}/{count}: the index must be below the count (0-based: 0/{} … {}/{})", count.max(1), count.max(1) - 1, count.max(1)));
        }
        Ok(Shard { index, count })
    }

    /// The shard a chunk id belongs to among `count`.
    pub fn of(chunk_id: &str, count: usize) -> usize {
        let h = blake3::hash(chunk_id.as_bytes());
        let mut b = [0u8; 8];
        b.copy_from_slice(&h.as_bytes()[..8]);
        (u64::from_le_bytes(b) % count as u64) as usize
    }

    /// Whether this shard holds `chunk_id`.
    pub fn owns(&self, chunk_id: &str) -> bool {
        Shard::of(chunk_id, self.count) == self.index
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let (i, n) = s.split_once('/').ok_or_else(|| format!("`{s}`: a shard is written i/n, e.g. 0/4"))?;
        let parse = |x: &str| x.trim().parse::<usize>().map_err(|_| format!("`{s}`: a shard is written i/n with whole numbers, e.g. 0/4"));
        Shard::new(parse(i)?, parse(n)?)
    }
}

impl Serialize for Shard {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Shard {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Shard, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_ids_stably() {
        let ids: Vec<String> = (0..3000).map(|i| format!("{i:016x}")).collect();
        let shards: Vec<Shard> = (0..4).map(|i| Shard::new(i, 4).unwrap()).collect();
        for id in &ids {
            assert_eq!(shards.iter().filter(|s| s.owns(id)).count(), 1, "{id}");
        }
        for s in &shards {
            let n = ids.iter().filter(|id| s.owns(id)).count();
            assert!((600..900).contains(&n), "shard {s}: {n} of 3000");
        }
        // Stable: a known id keeps its shard (BLAKE3 is fixed).
        assert_eq!(Shard::of("0000000000000000", 4), Shard::of("0000000000000000", 4));
        assert_eq!("2/4".parse::<Shard>().unwrap(), Shard { index: 2, count: 4 });
        assert_eq!(serde_json::to_string(&Shard { index: 1, count: 3 }).unwrap(), "\"1/3\"");
        for bad in ["4/4", "1", "a/2", "0/0"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
