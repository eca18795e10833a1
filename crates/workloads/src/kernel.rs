//! The five kernels: names, descriptions, paper classes and entry points.

use std::ffi::c_int;
use std::fmt;
use std::str::FromStr;

/// A workload kernel (one C file in `c/`, same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// Closed-form European option pricing over a synthetic portfolio.
    Pricing,
    /// Heat diffusion on a small plate, one parallel region per time step.
    Stencil,
    /// Hash → dedup → compress → write over a stream of blocks.
    Pipeline,
    /// Annealing-like placement with random reads of a shared placement.
    Anneal,
    /// Streaming k-means-style clustering with center opening/closing.
    Cluster,
}

/// Parallel model of a kernel, as in ars Table 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    /// Independent work on disjoint data, joined at barriers.
    DataParallel,
    /// Stages over a stream, some parallel, some in order.
    Pipeline,
    /// Irregular, fine-grained sharing of one data structure.
    Unstructured,
}

/// Granularity of a kernel's parallel work, as in ars Table 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// Few, large parallel regions (tens of ms).
    Coarse,
    /// Regions of a few ms.
    Medium,
    /// Many short regions (µs to a few ms) or fine-grained sharing.
    Fine,
}

/// The OpenMP schedule the kernel's loops use in the OpenMP build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Schedule {
    /// `schedule(static)`: contiguous blocks of chunks per thread.
    Static,
    /// `schedule(dynamic)`: threads take one chunk at a time.
    Dynamic,
}

/// Where a kernel sits in ars Table 1 (the PARSEC program classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Class {
    /// How the work is shared out: data parallel, a pipeline or unstructured.
    pub model: Model,
    /// How long its parallel regions last, from coarse (tens of ms) to fine (µs).
    pub granularity: Granularity,
    /// PARSEC programs of the same class.
    pub like: &'static [&'static str],
}

impl Kernel {
    /// Every kernel, in the order of `c/kernels.h`.
    pub const ALL: [Kernel; 5] = [
        Kernel::Pricing,
        Kernel::Stencil,
        Kernel::Pipeline,
        Kernel::Anneal,
        Kernel::Cluster,
    ];

    /// The name used on command lines and in output lines.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Pricing => "pricing",
            Kernel::Stencil => "stencil",
            Kernel::Pipeline => "pipeline",
            Kernel::Anneal => "anneal",
            Kernel::Cluster => "cluster",
        }
    }

    /// One line saying what the kernel computes.
    pub fn description(self) -> &'static str {
        match self {
            Kernel::Pricing => {
                "Black-Scholes pricing of 256 Ki options under 8 scenarios per pass; one region per pass"
            }
            Kernel::Stencil => {
                "heat diffusion on a 256x256 plate; one short region (tens of µs) per time step"
            }
            Kernel::Pipeline => {
                "hash, dedup, LZ77-compress and write 16 KiB blocks in batches of 64; two regions per batch"
            }
            Kernel::Anneal => {
                "swap-based annealing of 1 Mi elements on a grid; random reads of the shared placement, ordered commits"
            }
            Kernel::Cluster => {
                "streaming clustering of 16-d points in batches of 8192; nearest-center passes, center open/close"
            }
        }
    }

    /// The kernel's class in ars Table 1.
    pub fn class(self) -> Class {
        use Granularity::*;
        use Model::*;
        let (model, granularity, like): (_, _, &'static [&'static str]) = match self {
            Kernel::Pricing => (DataParallel, Coarse, &["blackscholes", "swaptions"]),
            Kernel::Stencil => (DataParallel, Fine, &["fluidanimate"]),
            Kernel::Pipeline => (Model::Pipeline, Medium, &["dedup", "ferret"]),
            Kernel::Anneal => (Unstructured, Fine, &["canneal"]),
            Kernel::Cluster => (DataParallel, Medium, &["streamcluster"]),
        };
        Class {
            model,
            granularity,
            like,
        }
    }

    /// The OpenMP schedule of the kernel's loops in the OpenMP build (from
    /// `c/kernels.h`): `static` where chunks cost the same, `dynamic` where
    /// they do not.
    pub fn omp_schedule(self) -> Schedule {
        match self {
            Kernel::Pipeline => Schedule::Dynamic,
            _ => Schedule::Static,
        }
    }
}

/// Status codes of the `wl_*` entry points (`c/wl.h`).
pub(crate) fn status_message(code: c_int) -> &'static str {
    match code {
        0 => "ok",
        1 => "bad scale",
        2 => "out of memory",
        3 => "self-check failed",
        _ => "unknown status",
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Model::DataParallel => "data-parallel",
            Model::Pipeline => "pipeline",
            Model::Unstructured => "unstructured",
        })
    }
}

impl fmt::Display for Granularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Granularity::Coarse => "coarse",
            Granularity::Medium => "medium",
            Granularity::Fine => "fine",
        })
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Schedule::Static => "static",
            Schedule::Dynamic => "dynamic",
        })
    }
}

impl fmt::Display for Class {
    /// `data-parallel, coarse (like blackscholes, swaptions)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, {} (like {})",
            self.model,
            self.granularity,
            self.like.join(", ")
        )
    }
}

/// A name that is no kernel's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKernel(pub String);

impl fmt::Display for UnknownKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown workload kernel '{}'; the kernels are", self.0)?;
        for k in Kernel::ALL {
            write!(f, " {k}")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownKernel {}

impl FromStr for Kernel {
    type Err = UnknownKernel;

    fn from_str(s: &str) -> Result<Kernel, UnknownKernel> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownKernel(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_kernels() {
        for k in Kernel::ALL {
            assert_eq!(k.to_string().parse::<Kernel>(), Ok(k));
        }
        let e = "bogus".parse::<Kernel>().unwrap_err();
        assert!(
            e.to_string()
                .contains("pricing stencil pipeline anneal cluster")
        );
    }

    /// `c/kernels.h` (which the OpenMP driver uses) and this file list the
    /// same kernels in the same order with the same schedules.
    #[test]
    fn agrees_with_the_c_kernel_table() {
        let table = include_str!("../c/kernels.h");
        let rows: Vec<(String, String)> = table
            .lines()
            .filter_map(|l| l.trim().strip_prefix("X("))
            .filter_map(|l| l.split_once(')'))
            .map(|(inner, _)| {
                let (n, s) = inner.split_once(',').expect("X(name, schedule)");
                (n.trim().to_string(), s.trim().to_string())
            })
            .collect();
        let ours: Vec<(String, String)> = Kernel::ALL
            .iter()
            .map(|k| {
                let s = match k.omp_schedule() {
                    Schedule::Static => "WL_STATIC",
                    Schedule::Dynamic => "WL_DYNAMIC",
                };
                (k.name().to_string(), s.to_string())
            })
            .collect();
        assert_eq!(rows, ours);
    }

    #[test]
    fn classes_cover_every_model_and_granularity() {
        let classes: Vec<Class> = Kernel::ALL.iter().map(|k| k.class()).collect();
        for m in [Model::DataParallel, Model::Pipeline, Model::Unstructured] {
            assert!(classes.iter().any(|c| c.model == m), "{m}");
        }
        for g in [Granularity::Coarse, Granularity::Medium, Granularity::Fine] {
            assert!(classes.iter().any(|c| c.granularity == g), "{g}");
        }
        assert_eq!(
            Kernel::Pricing.class().to_string(),
            "data-parallel, coarse (like blackscholes, swaptions)"
        );
    }
}
