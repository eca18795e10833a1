//! A broker of the test's own for the C ABI tests that need one
//! (`abi_broker.rs`, `abi_launcher.rs`).

use super::status;
use allot_broker::{Broker, Config, StopHandle};
use allot_capi::abi::cell::*;
use allot_capi::abi::status::Code;
use allot_capi::abi::*;
use allot_client::Client;
use allot_spec::CellSpec;
use std::ffi::CString;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::thread::JoinHandle;
use std::time::Duration;

/// A broker in this process (dry-run backend, private socket), stopped on
/// drop.
pub struct TestBroker {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub socket: CString,
    stop: StopHandle,
    thread: Option<JoinHandle<()>>,
}

impl TestBroker {
    pub fn start() -> TestBroker {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("allot.sock");
        let mut cfg = Config::new(socket.clone());
        cfg.backend = allot_enforce::BackendKind::DryRun;
        cfg.tick = Duration::from_millis(20);
        let broker = Broker::start(cfg).unwrap();
        let stop = broker.stop_handle();
        let thread = std::thread::spawn(move || broker.run().unwrap());
        TestBroker {
            socket: CString::new(socket.to_str().unwrap()).unwrap(),
            path: socket,
            _dir: dir,
            stop,
            thread: Some(thread),
        }
    }

    pub fn register(&self, name: &str, spec: Spec, wait: bool) -> Result<CellHandle, Code> {
        let name = CString::new(name).unwrap();
        let mut c = CellHandle::default();
        // SAFETY: valid strings, spec and out-pointer.
        let rc = unsafe {
            allot_cell_register_at(
                self.socket.as_ptr(),
                name.as_ptr(),
                &spec,
                i32::from(wait),
                &mut c,
            )
        };
        match status(rc) {
            Code::Ok => Ok(c),
            s => Err(s),
        }
    }

    /// A cell for another process (the broker admits one cell per
    /// process): a `sleep` child, registered through the Rust client.
    pub fn register_other(&self, spec: CellSpec) -> Other {
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let mut client = Client::connect(&self.path).unwrap();
        let reg = client
            .register("capi-other", spec, &[child.id()], false, false, |_, _| {})
            .unwrap();
        Other {
            child,
            client,
            cell: reg.cell,
            token: reg.token,
        }
    }

    pub fn stop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Another process's cell; released (and the process killed) on drop.
pub struct Other {
    child: Child,
    pub client: Client,
    pub cell: u64,
    /// The cell's token (its ticket's secret).
    pub token: u64,
}

impl Drop for Other {
    fn drop(&mut self) {
        let _ = self.client.release(self.cell);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPUs this process may use.
pub fn cpus() -> u32 {
    rustix::thread::sched_getaffinity(None).unwrap().count()
}
