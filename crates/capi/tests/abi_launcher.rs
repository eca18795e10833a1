//! The C ABI for launchers against a real broker (`abi/launcher.rs`):
//! the environment `allot run` gives a program, allot's Thread
//! Composability Manager, and tickets that let another process join a
//! cell.

mod abi_util;

use abi_util::broker::*;
use abi_util::*;
use allot_capi::abi::cell::*;
use allot_capi::abi::status::Code;
use allot_capi::abi::*;
use allot_client::Client;
use allot_spec::CellSpec;
use std::ffi::{CStr, CString, c_char, c_void};
use std::process::Command;

/// Collects what `allot_cell_environment` sets.
unsafe extern "C" fn collect(name: *const c_char, value: *const c_char, arg: *mut c_void) {
    // SAFETY: the library passes NUL-terminated strings and our `arg`.
    let (name, value, vars) = unsafe {
        (
            CStr::from_ptr(name).to_str().unwrap().to_owned(),
            CStr::from_ptr(value).to_str().unwrap().to_owned(),
            &mut *arg.cast::<Vec<(String, String)>>(),
        )
    };
    vars.push((name, value));
}

#[test]
fn a_launcher_gets_allot_s_thread_composability_manager() {
    let b = TestBroker::start();
    let c = b.register("capi-tcm", Spec::default(), false).unwrap();
    let t = tempfile::tempdir().unwrap();
    let trusted = allot_proto::dirs::TrustedDir::create(t.path(), 0o700).unwrap();
    let dir = allot_capi::tcm::install_tcm(&trusted, 0o700).unwrap();
    let dir_c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let mut vars: Vec<(String, String)> = Vec::new();
    let arg = (&raw mut vars).cast::<c_void>();
    // SAFETY: valid strings, callback and argument.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_tcm_environment(
            c,
            dir_c.as_ptr(),
            c"/opt/lib".as_ptr(),
            Some(collect),
            arg,
        )
    };
    ok(rc);
    let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("TCM_ENABLE").as_deref(), Some("1"));
    assert_eq!(
        get("LD_LIBRARY_PATH").unwrap(),
        format!("{}:/opt/lib", dir.display())
    );
    // The permit table: open, inheritable, the table's size.
    let fd: i32 = get("ALLOT_TCM_FD").unwrap().parse().unwrap();
    // SAFETY: the call opened it for us; we own it from here.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    assert!(
        !rustix::io::fcntl_getfd(&fd)
            .unwrap()
            .contains(rustix::io::FdFlags::CLOEXEC)
    );
    assert_eq!(
        std::fs::File::from(fd).metadata().unwrap().len(),
        allot_capi::tcm::TABLE_BYTES
    );
    // A directory without the library: a clear error, nothing set.
    vars.clear();
    let arg = (&raw mut vars).cast::<c_void>();
    // SAFETY: as above.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_tcm_environment(
            c,
            c"/nonexistent".as_ptr(),
            std::ptr::null(),
            Some(collect),
            arg,
        )
    };
    assert_eq!(status(rc), Code::Invalid);
    assert!(vars.is_empty());
    assert!(
        last_error().contains("allot shim --out"),
        "{}",
        last_error()
    );
    ok(allot_cell_free(c));
}

#[test]
fn a_launcher_gets_the_environment_allot_run_gives() {
    let b = TestBroker::start();
    let spec = Spec {
        max: 1,
        ..Spec::default()
    };
    let c = b.register("capi-environ", spec, false).unwrap();
    let mut id = 0;
    // SAFETY: a valid out-pointer.
    unsafe { ok(allot_cell_broker_id(c, &mut id)) };
    let mut vars: Vec<(String, String)> = Vec::new();
    let arg = (&raw mut vars).cast::<c_void>();
    // SAFETY: valid strings, callback and argument.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_environment(
            c,
            c"/opt/allot/liballot_shim.so".as_ptr(),
            c"/other.so".as_ptr(),
            Some(collect),
            arg,
        )
    };
    ok(rc);
    let get = |k: &str| {
        vars.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{k} not set: {vars:?}"))
    };
    assert_eq!(get("ALLOT_CELL"), id.to_string());
    assert_eq!(get("ALLOT_SOCKET"), b.path.to_str().unwrap());
    assert_eq!(get("LD_PRELOAD"), "/opt/allot/liballot_shim.so:/other.so");
    assert_eq!(get("OMP_NUM_THREADS"), "1", "the cell's maximum");
    assert_eq!(get("OPENBLAS_NUM_THREADS"), "1");
    // The page descriptor is open, inheritable, and the cell's page.
    let fd: i32 = get("ALLOT_GRANT_FD").parse().unwrap();
    // SAFETY: the call opened it for us; we own it from here.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let flags = rustix::io::fcntl_getfd(&fd).unwrap();
    assert!(!flags.contains(rustix::io::FdFlags::CLOEXEC));
    let page = allot_proto::PageMap::open(fd).unwrap();
    assert_eq!(page.page().read().cell, id);

    // No callback: a clear error, nothing set.
    // SAFETY: null strings are allowed; a null callback is the error.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_environment(
            c,
            std::ptr::null(),
            std::ptr::null(),
            None,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(status(rc), Code::Invalid);
    ok(allot_cell_free(c));

    // Without a maximum, the ceiling is every CPU the broker gives cells,
    // whatever the first grant.
    let c = b
        .register("capi-environ-all", Spec::default(), false)
        .unwrap();
    let mut vars: Vec<(String, String)> = Vec::new();
    let arg = (&raw mut vars).cast::<c_void>();
    // SAFETY: null strings are allowed; a valid callback and argument.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_environment(
            c,
            c"/opt/allot/liballot_shim.so".as_ptr(),
            std::ptr::null(),
            Some(collect),
            arg,
        )
    };
    ok(rc);
    let omp = vars.iter().find(|(n, _)| n == "OMP_NUM_THREADS").unwrap();
    assert_eq!(omp.1, cpus().to_string());
    let (_, fd) = vars.iter().find(|(n, _)| n == "ALLOT_GRANT_FD").unwrap();
    // SAFETY: the call opened it for us; closing it is ours to do.
    drop(unsafe {
        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd.parse().unwrap())
    });
    ok(allot_cell_free(c));
}

#[test]
fn a_ticket_lets_another_process_join_the_cell_and_nothing_else_does() {
    let b = TestBroker::start();
    // The registrant's side: a ticket of a cell this process registered.
    let mine = b.register("capi-ticket", Spec::default(), false).unwrap();
    let mut buf = [0 as c_char; allot_capi::abi::launcher::TICKET_MAX];
    // SAFETY: a buffer of ALLOT_TICKET_MAX bytes.
    ok(unsafe { allot_capi::abi::launcher::allot_cell_ticket(mine, buf.as_mut_ptr(), buf.len()) });
    // SAFETY: the library wrote a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned();
    let mut id = 0;
    // SAFETY: a valid out-pointer.
    unsafe { ok(allot_cell_broker_id(mine, &mut id)) };
    assert!(text.starts_with(&format!("{id}:")), "{text}");
    // Too short a buffer: a clear error.
    // SAFETY: a buffer of 4 bytes.
    let rc = unsafe { allot_capi::abi::launcher::allot_cell_ticket(mine, buf.as_mut_ptr(), 4) };
    assert_eq!(status(rc), Code::Invalid);
    ok(allot_cell_free(mine));

    // The joiner's side: a cell of another process (its registration's
    // ticket), which this process attaches to.
    let child = Command::new("sleep").arg("60").spawn().unwrap();
    let mut client = Client::connect(&b.path).unwrap();
    let reg = client
        .register(
            "capi-job",
            CellSpec::default(),
            &[child.id()],
            false,
            false,
            |_, _| {},
        )
        .unwrap();
    let attach = |ticket: &str| {
        let t = CString::new(ticket).unwrap();
        let mut c = CellHandle::default();
        // SAFETY: valid strings and out-pointer.
        let rc = unsafe {
            allot_capi::abi::launcher::allot_cell_attach_at(b.socket.as_ptr(), t.as_ptr(), &mut c)
        };
        (status(rc), c)
    };
    assert_eq!(attach("not a ticket").0, Code::Invalid);
    assert_eq!(
        attach(&format!("{}:{}", reg.cell, reg.token ^ 1)).0,
        Code::Permission
    );
    assert_eq!(
        attach(&format!("{}:{}", reg.cell + 100, reg.token)).0,
        Code::NoBroker
    );
    let (st, joined) = attach(&format!("{}:{}", reg.cell, reg.token));
    assert_eq!(st, Code::Ok, "{}", last_error());
    let mut mode = -1;
    let mut joined_id = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        ok(allot_cell_mode(joined, &mut mode));
        ok(allot_cell_broker_id(joined, &mut joined_id));
    }
    assert_eq!((mode, joined_id), (MODE_JOINED, reg.cell));
    assert!(grant(joined).unwrap().ncpus >= 1);
    // The broker counts this process among the cell's members.
    let members = client
        .status()
        .unwrap()
        .cells
        .into_iter()
        .find(|c| c.id == reg.cell)
        .unwrap()
        .pids;
    assert!(members.contains(&std::process::id()), "{members:?}");
    // Once in a cell, a process cannot attach to another.
    assert_eq!(
        attach(&format!("{}:{}", reg.cell, reg.token)).0,
        Code::Invalid
    );
    // Freeing the joined handle leaves the cell to its processes.
    ok(allot_cell_free(joined));
    assert!(
        client
            .status()
            .unwrap()
            .cells
            .iter()
            .any(|c| c.id == reg.cell)
    );
    let _ = client.release(reg.cell);
    let mut child = child;
    let _ = child.kill();
    let _ = child.wait();
}

/// A launcher whose processes live in cgroups of its own (Slurm's
/// cgroup/v2 plugins): it registers in place, attaches in place (getting
/// the grant without becoming a member), and has the cell include its
/// cgroup with the ticket; bad input gets a clear error.
#[test]
fn a_launcher_with_cgroups_of_its_own_registers_and_attaches_in_place() {
    use allot_capi::abi::launcher::{
        allot_cell_attach_in_place_at, allot_cell_include_group_at, allot_cell_register_in_place_at,
    };
    let b = TestBroker::start();
    let name = CString::new("capi-in-place").unwrap();
    let mut mine = CellHandle::default();
    // SAFETY: valid strings, spec and out-pointer.
    ok(unsafe {
        allot_cell_register_in_place_at(
            b.socket.as_ptr(),
            name.as_ptr(),
            &Spec::default(),
            0,
            &mut mine,
        )
    });
    let mut buf = [0 as c_char; allot_capi::abi::launcher::TICKET_MAX];
    // SAFETY: a buffer of ALLOT_TICKET_MAX bytes.
    ok(unsafe { allot_capi::abi::launcher::allot_cell_ticket(mine, buf.as_mut_ptr(), buf.len()) });
    // SAFETY: the library wrote a NUL-terminated string.
    let ticket = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_owned();
    let include = |ticket: &CStr, dir: Option<&str>| {
        let dir = dir.map(|d| CString::new(d).unwrap());
        // SAFETY: valid strings (or NULL for the dir).
        status(unsafe {
            allot_cell_include_group_at(
                b.socket.as_ptr(),
                ticket.as_ptr(),
                dir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()),
            )
        })
    };
    let group = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/user";
    let root = rustix::process::geteuid().is_root();
    assert_eq!(
        include(&ticket, Some(group)),
        if root { Code::Ok } else { Code::Permission },
        "{}",
        last_error()
    );
    assert_eq!(include(&ticket, None), Code::Invalid);
    assert_eq!(include(c"not a ticket", Some(group)), Code::Invalid);
    let id: u64 = ticket
        .to_str()
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let wrong = CString::new(format!("{id}:1")).unwrap();
    assert_eq!(include(&wrong, Some(group)), Code::Permission);
    ok(allot_cell_free(mine));

    // Attaching in place to another process's cell: the grant, not a
    // membership.
    let other = b.register_other(CellSpec::default());
    let t = CString::new(format!("{}:{}", other.cell, other.token)).unwrap();
    let mut joined = CellHandle::default();
    // SAFETY: valid strings and out-pointer.
    let rc = unsafe { allot_cell_attach_in_place_at(b.socket.as_ptr(), t.as_ptr(), &mut joined) };
    assert_eq!(status(rc), Code::Ok, "{}", last_error());
    assert!(grant(joined).unwrap().ncpus >= 1);
    let members = Client::connect(&b.path)
        .unwrap()
        .status()
        .unwrap()
        .cells
        .into_iter()
        .find(|c| c.id == other.cell)
        .unwrap()
        .pids;
    assert!(!members.contains(&std::process::id()), "{members:?}");
    ok(allot_cell_free(joined));
}
