//! Enters and leaves a prepared require scope in a loop (for profiling).
fn main() {
    use allot_require::{Blocks, Need};
    let rt = Blocks::new(allot_topo::discover_live().unwrap(), false).into_static();
    let p = rt.prepare(vec![Need::device("cpu", 0, 0.5)]).unwrap();
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let t = std::time::Instant::now();
    for _ in 0..n {
        drop(rt.enter_prepared(&p).unwrap());
    }
    println!(
        "{:.1} ns per enter+leave",
        t.elapsed().as_nanos() as f64 / n as f64
    );
}
