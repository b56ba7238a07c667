//! Where ranks sit: for each rank, its region at each level of the network hierarchy
//! (level 0 = rack, then coarser levels such as pods), each level nested in the next.
//!
//! Text form (the `GRADWIRE_TOPOLOGY` value): one region id per rank, comma-separated, a
//! level per `;`-separated group, level 0 first — `"0,0,1,1"` (2 racks), `"0,0,1,1,2,2,3,3;
//! 0,0,0,0,1,1,1,1"` (4 racks in 2 pods) — or the same as JSON: `[0,0,1,1]`,
//! `[[0,0,1,1],[0,0,0,0]]`. Region ids are labels: any non-negative integers.

use super::{LayoutError, Rank};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Each rank's region at each level of the network hierarchy, finest (rack) first; see
/// the module docs for the text form. Levels are nested: ranks sharing a region at one
/// level share one at every coarser level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RackMap {
    /// `levels[l][rank]`: the rank's region at level `l`, as given.
    levels: Vec<Vec<u32>>,
}

impl RackMap {
    /// One level: `rack_of[rank]` is the rack of each rank.
    pub fn from_racks(rack_of: Vec<u32>) -> RackMap {
        RackMap { levels: vec![rack_of] }
    }

    /// Several levels, finest first; every level has one entry per rank, and two ranks in
    /// the same region of a level are in the same region of every coarser level.
    pub fn new(levels: Vec<Vec<u32>>) -> Result<RackMap, LayoutError> {
        let Some(first) = levels.first() else {
            return Err(LayoutError("topology has no levels: give each rank's rack, e.g. \"0,0,1,1\"".into()));
        };
        let world = first.len();
        if world == 0 {
            return Err(LayoutError("topology has no ranks: give each rank's rack, e.g. \"0,0,1,1\"".into()));
        }
        for (l, level) in levels.iter().enumerate() {
            if level.len() != world {
                return Err(LayoutError(format!(
                    "topology level {l} has {} entries but level 0 has {world}: every level needs one region per rank",
                    level.len()
                )));
            }
        }
        for l in 1..levels.len() {
            let mut up: BTreeMap<u32, (usize, u32)> = BTreeMap::new();
            for (rank, (&fine, &coarse)) in levels[l - 1].iter().zip(&levels[l]).enumerate() {
                let &mut (first_rank, first_coarse) = up.entry(fine).or_insert((rank, coarse));
                if first_coarse != coarse {
                    return Err(LayoutError(format!(
                        "topology levels are not nested: ranks {first_rank} and {rank} share region {fine} at level {} \
                         but are in regions {first_coarse} and {coarse} at level {l}",
                        l - 1
                    )));
                }
            }
        }
        Ok(RackMap { levels })
    }

    /// Parses the text or JSON form (module doc).
    pub fn parse(text: &str) -> Result<RackMap, LayoutError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(LayoutError("topology is empty: give each rank's rack, e.g. \"0,0,1,1\"".into()));
        }
        let levels = if t.starts_with('[') { parse_json(t)? } else { parse_plain(t)? };
        RackMap::new(levels)
    }

    /// Number of ranks (entries per level).
    pub fn world(&self) -> u32 {
        self.levels[0].len() as u32
    }

    /// Number of levels (oversubscription layers), at least 1.
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// Region of `rank` at `level`, as given.
    pub fn region(&self, level: usize, rank: Rank) -> u32 {
        self.levels[level][rank as usize]
    }

    /// Every rank's region at `level`, indexed by rank. Panics if `level >= levels()`.
    pub fn level(&self, level: usize) -> &[u32] {
        &self.levels[level]
    }

    /// `a` and `b` share a region at `level`.
    pub fn same_region(&self, level: usize, a: Rank, b: Rank) -> bool {
        self.region(level, a) == self.region(level, b)
    }

    /// Distinct regions at `level`.
    pub fn regions(&self, level: usize) -> u32 {
        let mut ids = self.levels[level].clone();
        ids.sort_unstable();
        ids.dedup();
        ids.len() as u32
    }

    /// The JSON form, `[[...],[...]]`.
    pub fn to_json(&self) -> String {
        let levels: Vec<String> = self.levels.iter().map(|l| format!("[{}]", join(l, ","))).collect();
        format!("[{}]", levels.join(","))
    }
}

fn join(ids: &[u32], sep: &str) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(sep)
}

/// The text form, `0,0,1,1;0,0,0,0`.
impl fmt::Display for RackMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let levels: Vec<String> = self.levels.iter().map(|l| join(l, ",")).collect();
        f.write_str(&levels.join(";"))
    }
}

impl FromStr for RackMap {
    type Err = LayoutError;
    fn from_str(s: &str) -> Result<RackMap, LayoutError> {
        RackMap::parse(s)
    }
}

fn region_id(tok: &str, level: usize, rank: usize) -> Result<u32, LayoutError> {
    tok.trim().parse::<u32>().map_err(|_| {
        LayoutError(format!(
            "topology level {level}, rank {rank}: `{}` is not a region id (a non-negative integer)",
            tok.trim()
        ))
    })
}

fn parse_plain(t: &str) -> Result<Vec<Vec<u32>>, LayoutError> {
    t.split(';')
        .enumerate()
        .map(|(l, level)| level.split(',').enumerate().map(|(r, tok)| region_id(tok, l, r)).collect())
        .collect()
}

/// `[ids]` or `[[ids], [ids], ...]`, nothing else.
fn parse_json(t: &str) -> Result<Vec<Vec<u32>>, LayoutError> {
    let bad =
        |why: &str| LayoutError(format!("topology JSON must be [ids] or [[ids], ...] of non-negative integers: {why}"));
    let inner = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')).ok_or_else(|| bad("missing closing `]`"))?.trim();
    if inner.is_empty() {
        return Err(bad("the list is empty"));
    }
    if !inner.starts_with('[') {
        if inner.contains('[') || inner.contains(']') {
            return Err(bad("mixes ids and lists"));
        }
        return Ok(vec![inner
            .split(',')
            .enumerate()
            .map(|(r, tok)| region_id(tok, 0, r))
            .collect::<Result<_, _>>()?]);
    }
    let mut levels = Vec::new();
    let mut rest = inner;
    loop {
        let body = rest.strip_prefix('[').ok_or_else(|| bad("expected `[` to start a level"))?;
        let end = body.find(']').ok_or_else(|| bad("a level misses its `]`"))?;
        let l = levels.len();
        let ids = &body[..end];
        if ids.contains('[') {
            return Err(bad("lists nest at most two deep"));
        }
        levels.push(ids.split(',').enumerate().map(|(r, tok)| region_id(tok, l, r)).collect::<Result<Vec<_>, _>>()?);
        rest = body[end + 1..].trim_start();
        if rest.is_empty() {
            return Ok(levels);
        }
        rest = rest.strip_prefix(',').ok_or_else(|| bad("levels must be separated by `,`"))?.trim_start();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_forms_parse_to_the_same_map() {
        let a = RackMap::parse("0,0,1,1,2,2,3,3;0,0,0,0,1,1,1,1").unwrap();
        let b = RackMap::parse(" [[0, 0, 1, 1, 2, 2, 3, 3], [0,0,0,0,1,1,1,1]] ").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.world(), 8);
        assert_eq!(a.levels(), 2);
        assert_eq!((a.regions(0), a.regions(1)), (4, 2));
        assert_eq!(a.to_string().parse::<RackMap>().unwrap(), a);
        assert_eq!(RackMap::parse(&a.to_json()).unwrap(), a);
        assert_eq!(RackMap::parse("[5, 5, 9]").unwrap(), RackMap::from_racks(vec![5, 5, 9]));
        assert_eq!(RackMap::parse("3").unwrap().world(), 1);
    }

    #[test]
    fn errors_say_what_is_wrong_and_where() {
        let err = |s: &str| RackMap::parse(s).unwrap_err().to_string();
        assert!(err("").contains("empty"));
        assert!(err("0,0,x,1").contains("level 0, rank 2: `x` is not a region id"), "{}", err("0,0,x,1"));
        assert!(err("0,0,-1").contains("`-1`"));
        assert!(err("0,0,,1").contains("rank 2: `` is not"));
        assert!(err("0,0,1;0,0").contains("level 1 has 2 entries but level 0 has 3"));
        assert!(err("0,0,1,1;0,1,1,1")
            .contains("ranks 0 and 1 share region 0 at level 0 but are in regions 0 and 1 at level 1"));
        assert!(err("[0,1").contains("closing"));
        assert!(err("[]").contains("empty"));
        assert!(err("[[0,1],2]").contains("separated") || err("[[0,1],2]").contains("`[`"), "{}", err("[[0,1],2]"));
        assert!(err("[0,[1]]").contains("mixes"));
        assert!(
            err("[[0,[1]]]").contains("two deep") || err("[[0,[1]]]").contains("not a region id"),
            "{}",
            err("[[0,[1]]]")
        );
    }
}
