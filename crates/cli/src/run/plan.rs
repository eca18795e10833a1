//! What `allot run` will ask for and run, from its arguments alone: the
//! program (resolved as `env` does), its arguments with a make's or
//! ninja's jobs planned, the jobserver's style, the cell's spec (checked
//! here, once, where the flags enter), the cell's name and the broker's
//! socket. Nothing here talks to the broker or starts anything, so a
//! mistake in the command line costs no cell.

use super::jobserver::Style;
use super::{Args, contract, makeargs, resolve};
use allot_spec::CellSpec;
use std::ffi::OsString;
use std::path::PathBuf;

/// The run, planned. A failure is the exit code, its reason printed.
pub(super) struct Plan {
    /// The program's path.
    pub program: PathBuf,
    /// Its arguments, a top make's or ninja's `-j` taken out.
    pub args: Vec<OsString>,
    /// The most jobs the jobserver hands out (`None`: the grant).
    pub cap: Option<usize>,
    /// Whether `MAKEFLAGS` names the jobserver.
    pub make_jobs: bool,
    /// The jobserver's style (`None`: no jobserver).
    pub style: Option<Style>,
    /// What the cell asks for, checked.
    pub spec: CellSpec,
    /// The cell's name in `allot status`.
    pub name: String,
    /// The broker's socket.
    pub socket: PathBuf,
}

impl Plan {
    pub(super) fn of(a: &Args) -> Result<Plan, i32> {
        let cmd = &a.command[0];
        let program = match resolve::resolve(cmd, std::env::var_os("PATH").as_deref()) {
            Ok(p) => p,
            Err(e) => {
                let what = match &e {
                    resolve::Unrunnable::NotFound => "No such file or directory".to_string(),
                    resolve::Unrunnable::NotExecutable(p) => {
                        format!("Permission denied ({})", p.display())
                    }
                };
                eprintln!("allot: '{}': {what}", cmd.to_string_lossy());
                return Err(e.exit_code());
            }
        };
        let jobserver_on = a.jobserver.as_deref() != Some("off");
        let makeflags = std::env::var("MAKEFLAGS").ok();
        let makeargs::MakeJobs {
            args,
            cap,
            make_jobs,
        } = makeargs::plan_jobs(
            &program,
            a.command[1..].to_vec(),
            jobserver_on,
            makeflags.as_deref(),
        );
        let style = match a.jobserver.as_deref() {
            Some("off") => None,
            Some(s) => match s.parse::<Style>() {
                Ok(st) => Some(st),
                Err(e) => {
                    eprintln!("allot: --jobserver: {e}");
                    return Err(2);
                }
            },
            None if makeargs::is_ninja(&program) => {
                Some(makeargs::default_style(&program, installed_make_version()))
            }
            None => Some(Style::Pipe),
        };
        let spec = spec_of(a)?;
        let name = a.name.clone().unwrap_or_else(|| {
            program
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        let socket = a
            .socket
            .clone()
            .unwrap_or_else(allot_proto::default_socket_path);
        Ok(Plan {
            program,
            args,
            cap,
            make_jobs,
            style,
            spec,
            name,
            socket,
        })
    }
}

/// The cell's spec from the flags, checked once, here, where they enter
/// (the broker checks what it reads again: another process's word).
fn spec_of(a: &Args) -> Result<CellSpec, i32> {
    if a.partition == Some(0) {
        eprintln!("allot: --partition 0: a partition has at least one CPU");
        return Err(2);
    }
    let mut spec = CellSpec {
        weight: a.weight,
        placement: a.place,
        goal: a.goal.unwrap_or_default(),
        ..match a.partition {
            Some(n) => CellSpec::partition(n),
            None => CellSpec {
                min: a.min,
                max: a.max,
                exclusive: a.exclusive,
                ..CellSpec::default()
            },
        }
    };
    let time = contract::TimeFlags {
        period: a.period.clone(),
        budget: a.budget.clone(),
        fraction: a.fraction,
        slice: a.slice.clone(),
        message_idle: a.message_idle.clone(),
        cpus: a.cpus,
    };
    spec.memory = allot_spec::Memory {
        min: a.memory_min.unwrap_or(0),
        max: a.memory_max.unwrap_or(0),
    };
    spec.cache = allot_spec::Cache {
        ways: a.cache_ways.unwrap_or(0),
        bandwidth: a.mem_bandwidth.unwrap_or(0),
    };
    if let Err(e) = contract::apply(&time, &mut spec) {
        eprintln!("allot: {e}");
        return Err(2);
    }
    match spec.check() {
        Ok(s) => Ok(s.into_spec()),
        Err(e) => {
            eprintln!("allot: {e}");
            Err(2)
        }
    }
}

/// The version of the make on `PATH` (`None`: none, or not GNU make).
fn installed_make_version() -> Option<(u32, u32)> {
    let out = std::process::Command::new("make")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    makeargs::make_version(&String::from_utf8_lossy(&out.stdout))
}
