//! A fixed-capacity set of logical CPU numbers.
//!
//! `CpuSet` is a plain bitmap of [`MAX_CPUS`] bits. It is `Copy`, never
//! allocates, and its word layout is the one the kernel uses for
//! `sched_setaffinity` and the one the grant page stores, so converting between
//! them is a copy of words. The set operations are a loop over 16 words and
//! are marked `#[inline]`: the planner runs them for every cell of every
//! plan, from another crate.
//!
//! The text form is the kernel's *cpulist* syntax (`0-3,8,10-11`), used by
//! sysfs, `/proc/PID/status` (`Cpus_allowed_list`) and cgroup `cpuset.cpus`
//! files. [`CpuSet::parse_list`] accepts exactly what the kernel prints plus
//! surrounding whitespace; `Display` prints the canonical compressed form.

use std::fmt;
use std::str::FromStr;

/// Largest number of logical CPUs allot manages (the glibc `CPU_SETSIZE`).
pub const MAX_CPUS: usize = 1024;

/// Number of 64-bit words in a [`CpuSet`].
pub const CPUSET_WORDS: usize = MAX_CPUS / 64;

/// A set of logical CPU ids below [`MAX_CPUS`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CpuSet {
    words: [u64; CPUSET_WORDS],
}

/// Why a cpulist could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// A token was not a number or a `lo-hi` range.
    #[error("invalid cpulist token {token:?} (expected forms like 0-3,8)")]
    BadToken {
        /// The offending token.
        token: String,
    },
    /// A range ended before it started.
    #[error("invalid cpulist range {lo}-{hi}: end is before start")]
    Reversed {
        /// The number before the dash.
        lo: usize,
        /// The number after the dash, smaller than `lo`.
        hi: usize,
    },
    /// A CPU number is at or above [`MAX_CPUS`].
    #[error("CPU {cpu} is out of range (allot manages at most {MAX_CPUS} CPUs)")]
    TooLarge {
        /// The CPU number.
        cpu: usize,
    },
}

impl CpuSet {
    /// The empty set.
    pub const EMPTY: CpuSet = CpuSet {
        words: [0; CPUSET_WORDS],
    };

    /// An empty set.
    pub const fn new() -> Self {
        Self::EMPTY
    }

    /// The set `{0, 1, …, n-1}`.
    pub fn first_n(n: usize) -> Self {
        let mut s = Self::new();
        for cpu in 0..n.min(MAX_CPUS) {
            s.insert(cpu);
        }
        s
    }

    /// Builds a set from raw bitmap words (bit `i` of word `w` is CPU `64*w+i`).
    #[inline]
    pub const fn from_words(words: [u64; CPUSET_WORDS]) -> Self {
        CpuSet { words }
    }

    /// The raw bitmap words.
    #[inline]
    pub const fn words(&self) -> &[u64; CPUSET_WORDS] {
        &self.words
    }

    /// Adds `cpu`. Panics if `cpu >= MAX_CPUS` (a programming error: every
    /// CPU number entering allot passes through [`CpuSet::parse_list`] or
    /// topology discovery, which both reject such numbers).
    #[inline]
    pub fn insert(&mut self, cpu: usize) -> bool {
        assert!(cpu < MAX_CPUS, "CPU {cpu} out of range");
        let (w, b) = (cpu / 64, cpu % 64);
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        !was
    }

    /// Removes `cpu`; returns whether it was present.
    #[inline]
    pub fn remove(&mut self, cpu: usize) -> bool {
        if cpu >= MAX_CPUS {
            return false;
        }
        let (w, b) = (cpu / 64, cpu % 64);
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] &= !(1 << b);
        was
    }

    /// Whether `cpu` is in the set.
    #[inline]
    pub fn contains(&self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// Number of CPUs in the set.
    #[inline]
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Lowest CPU in the set.
    #[inline]
    pub fn first(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }

    /// Highest CPU in the set.
    #[inline]
    pub fn last(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + 63 - w.leading_zeros() as usize)
    }

    /// Iterates over the CPUs in increasing order.
    #[inline]
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            set: self,
            word: 0,
            bits: self.words[0],
        }
    }

    /// `self ∪ other`.
    #[must_use]
    #[inline]
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        self.zip(other, |a, b| a | b)
    }

    /// `self ∩ other`.
    #[must_use]
    #[inline]
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        self.zip(other, |a, b| a & b)
    }

    /// `self \ other`.
    #[must_use]
    #[inline]
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        self.zip(other, |a, b| a & !b)
    }

    /// Whether every CPU of `self` is in `other`.
    #[inline]
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .zip(other.words.iter())
            .all(|(a, b)| a & !b == 0)
    }

    /// Whether the two sets share a CPU.
    #[inline]
    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .zip(other.words.iter())
            .any(|(a, b)| a & b != 0)
    }

    /// The first `n` CPUs of the set, in increasing order.
    #[must_use]
    pub fn take_first(&self, n: usize) -> CpuSet {
        self.iter().take(n).collect()
    }

    #[inline]
    fn zip(&self, other: &CpuSet, f: impl Fn(u64, u64) -> u64) -> CpuSet {
        let mut out = CpuSet::new();
        for i in 0..CPUSET_WORDS {
            out.words[i] = f(self.words[i], other.words[i]);
        }
        out
    }

    /// Parses the kernel's cpulist syntax (`0-3,8,10-11`; the empty string is
    /// the empty set), as sysfs and cgroup files print it.
    pub fn parse_list(text: &str) -> Result<CpuSet, CpuListError> {
        let mut set = CpuSet::new();
        let text = text.trim();
        if text.is_empty() {
            return Ok(set);
        }
        for token in text.split(',') {
            let token = token.trim();
            let bad = || CpuListError::BadToken {
                token: token.to_string(),
            };
            let (lo, hi) = match token.split_once('-') {
                Some((a, b)) => (
                    a.trim().parse::<usize>().map_err(|_| bad())?,
                    b.trim().parse::<usize>().map_err(|_| bad())?,
                ),
                None => {
                    let v = token.parse::<usize>().map_err(|_| bad())?;
                    (v, v)
                }
            };
            if hi < lo {
                return Err(CpuListError::Reversed { lo, hi });
            }
            if hi >= MAX_CPUS {
                return Err(CpuListError::TooLarge { cpu: hi });
            }
            for cpu in lo..=hi {
                set.insert(cpu);
            }
        }
        Ok(set)
    }
}

impl fmt::Display for CpuSet {
    /// Canonical cpulist: ascending, ranges of 2 or more consecutive CPUs
    /// compressed (`0-3,8`). The empty set prints as the empty string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut it = self.iter().peekable();
        while let Some(lo) = it.next() {
            let mut hi = lo;
            while it.peek() == Some(&(hi + 1)) {
                hi = it.next().unwrap_or(hi);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if hi == lo {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl FromStr for CpuSet {
    type Err = CpuListError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse_list(s)
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for cpu in iter {
            s.insert(cpu);
        }
        s
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        CpuSet::parse_list(&text).map_err(serde::de::Error::custom)
    }
}

/// Iterator over a [`CpuSet`] in increasing order.
#[derive(Debug)]
pub struct Iter<'a> {
    set: &'a CpuSet,
    word: usize,
    bits: u64,
}

impl Iterator for Iter<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        loop {
            if self.bits != 0 {
                let b = self.bits.trailing_zeros() as usize;
                self.bits &= self.bits - 1;
                return Some(self.word * 64 + b);
            }
            self.word += 1;
            if self.word >= CPUSET_WORDS {
                return None;
            }
            self.bits = self.set.words[self.word];
        }
    }
}

impl<'a> IntoIterator for &'a CpuSet {
    type Item = usize;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_kernel_forms() {
        let s = CpuSet::parse_list("0-3,8,10-11\n").unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(s.to_string(), "0-3,8,10-11");
        assert!(CpuSet::parse_list("").unwrap().is_empty());
        assert_eq!(CpuSet::parse_list("5").unwrap().to_string(), "5");
        assert_eq!(CpuSet::parse_list("1,2").unwrap().to_string(), "1-2");
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            CpuSet::parse_list("a"),
            Err(CpuListError::BadToken { .. })
        ));
        assert!(matches!(
            CpuSet::parse_list("3-1"),
            Err(CpuListError::Reversed { lo: 3, hi: 1 })
        ));
        assert!(matches!(
            CpuSet::parse_list("0-5000"),
            Err(CpuListError::TooLarge { cpu: 5000 })
        ));
        assert!(CpuSet::parse_list("1,,2").is_err());
    }

    #[test]
    fn set_algebra() {
        let a = CpuSet::parse_list("0-7").unwrap();
        let b = CpuSet::parse_list("4-11").unwrap();
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.union(&b).to_string(), "0-11");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert!(a.intersects(&b));
        assert!(CpuSet::parse_list("5-6").unwrap().is_subset(&a));
        assert_eq!(a.first(), Some(0));
        assert_eq!(b.last(), Some(11));
        assert_eq!(CpuSet::parse_list("1000-1023").unwrap().last(), Some(1023));
        assert_eq!(a.take_first(3).to_string(), "0-2");
    }

    proptest! {
        #[test]
        fn display_parse_roundtrip(cpus in proptest::collection::btree_set(0usize..MAX_CPUS, 0..64)) {
            let s: CpuSet = cpus.iter().copied().collect();
            let back = CpuSet::parse_list(&s.to_string()).unwrap();
            prop_assert_eq!(back, s);
            prop_assert_eq!(s.len(), cpus.len());
            prop_assert_eq!(s.iter().collect::<Vec<_>>(), cpus.into_iter().collect::<Vec<_>>());
        }
    }
}
