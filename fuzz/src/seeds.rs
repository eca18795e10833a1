//! Writes the seed corpus in `fuzz/corpus/<target>/`: one valid input of
//! every shape each target reads (every request and reply kind, a published
//! grant page with and without its report page, journals of versions 1, 2
//! and 4, a full configuration). Run by
//! `scripts/fuzz.sh --seeds`; its output is committed.

use allot_proto::msg::{example_replies, example_requests};
use allot_proto::{Grant, PageMap};
use std::path::Path;

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for r in example_requests() {
        write(
            &root.join("wire"),
            &format!("request-{:02x}", r.kind()),
            &r.encode(),
        );
    }
    for r in example_replies() {
        write(
            &root.join("wire"),
            &format!("reply-{:02x}", r.kind()),
            &r.encode(),
        );
    }

    let page = PageMap::create(5, 77).unwrap();
    page.page().publish(&Grant {
        cell: 5,
        generation: 3,
        instance: 77,
        threads: 2,
        flags: 1,
        entitled: 2,
        share_milli: 1500,
        home: 1,
        window: allot_proto::Window {
            origin_ns: 1_000_000,
            period_us: 10_000,
            budget_us: 3_000,
        },
        cpus: allot_topo_cpus("0-3,64"),
        lent: allot_topo_cpus("3"),
    });
    let reports = page.reports().unwrap();
    reports.heartbeat(40);
    reports.record_latency(std::time::Duration::from_micros(300));
    reports.record_latency(std::time::Duration::from_millis(7));
    let mut bytes = vec![0u8; allot_proto::PAGE_SIZE];
    rustix::io::pread(page.fd(), &mut bytes, 0).unwrap();
    write(&root.join("page"), "published", &bytes);
    // The grant page, the control byte (sealed, a report page follows),
    // then the report page: the input shape of the `page` target.
    let mut both = bytes.clone();
    both.push(2);
    let mut report = vec![0u8; allot_proto::PAGE_SIZE];
    rustix::io::pread(page.fd(), &mut report, allot_proto::PAGE_SIZE as u64).unwrap();
    both.extend_from_slice(&report);
    write(&root.join("page"), "published-with-reports", &both);

    write(
        &root.join("journal"),
        "version-1",
        b"{\"t\":\"next_id\",\"next\":5}\n\
          {\"t\":\"cell\",\"id\":4,\"name\":\"make\",\"uid\":1000,\"spec\":{\"min\":1,\"max\":0,\"weight\":2,\"exclusive\":true,\"placement\":\"numa\"},\"token\":9}\n\
          {\"t\":\"member\",\"id\":4,\"member\":{\"pid\":77,\"start\":12}}\n\
          {\"t\":\"grant\",\"id\":4,\"grant\":{\"generation\":3,\"cpus\":\"0-1\",\"lent\":\"\",\"entitled\":\"0-1\",\"threads\":2,\"stacked\":false,\"share\":2.0,\"demand\":null}}\n\
          {\"t\":\"shared\",\"pool\":\"\",\"reserve\":\"\"}\n\
          {\"t\":\"gone\",\"id\":4,\"pid\":77}\n\
          {\"t\":\"end\",\"id\":4}\n",
    );
    write(
        &root.join("journal"),
        "version-2",
        b"{\"t\":\"header\",\"version\":2}\n\
          {\"t\":\"cell\",\"id\":2,\"name\":\"recovered-2\",\"uid\":0,\"spec\":{\"min\":0,\"max\":0,\"weight\":1,\"exclusive\":false,\"placement\":\"any\"},\"token\":0}\n\
          {\"t\":\"token\",\"id\":2,\"token\":7}\n\
          {\"t\":\"spec\",\"id\":2,\"spec\":{\"min\":1,\"max\":2,\"weight\":3,\"exclusive\":false,\"placement\":\"llc\"}}\n",
    );
    write(
        &root.join("journal"),
        "version-4",
        b"{\"t\":\"header\",\"version\":4}\n\
          {\"t\":\"cell\",\"id\":3,\"name\":\"srv\",\"uid\":1000,\"spec\":{\"min\":0,\"max\":4,\"weight\":1,\"exclusive\":false,\"placement\":\"any\",\"time\":{\"kind\":\"space\"},\"goal\":{\"kind\":\"p99\",\"us\":5000}},\"token\":5}\n\
          {\"t\":\"cell\",\"id\":4,\"name\":\"tick\",\"uid\":1000,\"spec\":{\"min\":1,\"max\":0,\"weight\":1,\"exclusive\":false,\"placement\":\"any\",\"time\":{\"kind\":\"triggered\",\"period_us\":10000,\"budget_us\":3000}},\"token\":6}\n\
          {\"t\":\"spec\",\"id\":3,\"spec\":{\"min\":0,\"max\":4,\"weight\":1,\"exclusive\":false,\"placement\":\"any\",\"goal\":{\"kind\":\"rate\",\"milli_per_s\":200000}}}\n",
    );
    write(
        &root.join("config"),
        "full.toml",
        b"backend = \"dry-run\"\npolicy = \"priority\"\nreserve = 1\nlend = false\ncpus = \"0-3\"\n\
          tick_ms = 50\ncgroup_name = \"allot\"\nidle_exit_s = 5\nshow_other_users = true\n\
          [limits]\nconnections = 9\ncells = 8\nqueued = 2\nmembers = 16\nkinds = 3\ndevices = 4\n\
          holdings = 10\ncells_total = 100\nkinds_total = 20\n",
    );
    println!("seeds written under {}", root.display());
}

fn allot_topo_cpus(list: &str) -> allot_topo::CpuSet {
    allot_topo::CpuSet::parse_list(list).unwrap()
}
