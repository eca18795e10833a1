//! The fixture machines load with the expected shape.

use allot_topo::{CpuSet, FIXTURES, LARGEST_FIXTURE, MAX_CPUS, TopologyReport, fixture};

fn counts(name: &str) -> (usize, usize, usize, usize) {
    let m = fixture(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    (
        m.num_cpus(),
        m.cores().len(),
        m.llcs().len(),
        m.nodes().len(),
    )
}

#[test]
fn fixture_shapes() {
    assert_eq!(counts("vm2"), (2, 2, 1, 1));
    assert_eq!(counts("opteron6276-4s"), (64, 64, 8, 8));
    assert_eq!(counts("xeonphi7250"), (272, 68, 34, 1));
    assert_eq!(counts("xeon-x5550-2s"), (16, 8, 2, 2));
    assert_eq!(counts("xeon16-1llc"), (16, 16, 1, 1));
    assert_eq!(counts("synth-8s-1024"), (1024, 512, 16, 8));
}

#[test]
fn the_largest_fixture_fills_every_cpu_id() {
    let m = fixture(LARGEST_FIXTURE).unwrap();
    assert_eq!(m.num_cpus(), MAX_CPUS);
    assert_eq!(m.usable().last(), Some(MAX_CPUS - 1));
    // Intel numbering: CPU c and c + 512 are the two threads of one core.
    let core5 = &m.cores()[m.cpu(5).unwrap().core];
    assert_eq!(core5.cpus.to_string(), "5,517");
    // Two 32-core dies per package, each with its own L3 (the LLC).
    let die = &m.llcs()[m.cpu(600).unwrap().llc];
    assert_eq!(die.cpus.to_string(), "64-95,576-607");
    assert_eq!(die.level, 3);
    let node7 = &m.nodes()[7];
    assert_eq!(node7.cpus.to_string(), "448-511,960-1023");
    assert_eq!(node7.distances, [31, 31, 31, 31, 21, 21, 21, 10]);
    for n in m.nodes() {
        assert_eq!(n.cpus.len(), 128);
        assert_eq!(
            m.llcs()
                .iter()
                .filter(|l| l.cpus.is_subset(&n.cpus))
                .count(),
            2
        );
    }
}

#[test]
fn the_vm_shape_has_one_of_everything_but_cpus() {
    let m = fixture("xeon16-1llc").unwrap();
    assert_eq!(m.llcs()[0].cpus.to_string(), "0-15");
    assert_eq!(m.nodes()[0].cpus.to_string(), "0-15");
    assert!(m.cores().iter().all(|c| c.cpus.len() == 1));
}

#[test]
fn every_cpu_in_one_core_llc_node() {
    for name in FIXTURES {
        let m = fixture(name).unwrap();
        for c in m.cpus() {
            assert!(m.cores()[c.core].cpus.contains(c.id), "{name} cpu {}", c.id);
            assert!(m.llcs()[c.llc].cpus.contains(c.id));
            assert!(m.nodes()[c.node].cpus.contains(c.id));
            assert!(m.cores()[c.core].cpus.is_subset(&m.llcs()[c.llc].cpus));
            assert!(m.llcs()[c.llc].cpus.is_subset(&m.nodes()[c.node].cpus));
        }
        let total: usize = m.cores().iter().map(|c| c.cpus.len()).sum();
        assert_eq!(total, m.num_cpus(), "{name}: cores partition the CPUs");
    }
}

#[test]
fn knl_numbering_and_tiles() {
    let m = fixture("xeonphi7250").unwrap();
    let core5 = &m.cores()[m.cpu(5).unwrap().core];
    assert_eq!(core5.cpus.to_string(), "5,73,141,209");
    let tile0 = &m.llcs()[m.cpu(0).unwrap().llc];
    assert_eq!(tile0.cpus.to_string(), "0-1,68-69,136-137,204-205");
    assert_eq!(tile0.level, 2);
}

#[test]
fn numa_distances_survive_reordering() {
    let m = fixture("opteron6276-4s").unwrap();
    for n in m.nodes() {
        assert_eq!(n.distances[n.index], 10);
        assert_eq!(n.cpus.len(), 8);
        assert_eq!(n.mem_total_kib, 33554432);
    }
    // Node 0 and 1 share a package (16); node 0 and 2 do not (22).
    assert_eq!(m.nodes()[0].distances[1], 16);
    assert_eq!(m.nodes()[0].distances[2], 22);
    assert!(m.cpu_distance(0, 8) < m.cpu_distance(0, 16));
    let x = fixture("xeon-x5550-2s").unwrap();
    assert_eq!(x.nodes()[1].cpus.to_string(), "4-7,12-15");
    assert_eq!(x.cpu_distance(0, 8), 1, "SMT siblings");
    assert_eq!(x.cpu_distance(0, 1), 2, "same LLC");
}

#[test]
fn restricting_to_an_affinity_mask() {
    let m = fixture("xeon-x5550-2s").unwrap();
    let r = m.restrict(&CpuSet::parse_list("0-3").unwrap()).unwrap();
    assert_eq!(r.num_cpus(), 4);
    assert_eq!(r.cores().len(), 4);
    assert_eq!(r.nodes().iter().filter(|n| !n.cpus.is_empty()).count(), 1);
}

#[test]
fn json_report_has_one_entry_per_cpu() {
    let m = fixture("xeon-x5550-2s").unwrap();
    let v: serde_json::Value = serde_json::to_value(TopologyReport::new(&m)).unwrap();
    let cpus = v["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), 16);
    assert_eq!(cpus[8]["cpu"], 8);
    assert_eq!(cpus[8]["core"], cpus[0]["core"]);
    assert_eq!(v["nodes"][1]["cpus"], "4-7,12-15");
}

#[test]
fn live_machine_matches_vm2_fixture_when_run_here() {
    // The live discovery must at least produce a consistent machine.
    let live = allot_topo::discover_live().expect("live sysfs readable");
    assert!(live.num_cpus() >= 1);
    assert_eq!(live.num_cpus(), live.usable().len());
    // On the 2-CPU development VM the fixture was captured from, they agree.
    let vm2 = fixture("vm2").unwrap();
    if live.num_cpus() == 2 && live.nodes().len() == 1 && live.llcs().len() == 1 {
        assert_eq!(live.cores().len(), vm2.cores().len());
        assert_eq!(live.llcs()[0].cpus, vm2.llcs()[0].cpus);
    }
}
