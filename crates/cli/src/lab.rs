//! `allot-lab`: the demo and the experiments, a binary apart from `allot`
//! (the code is the `allot-lab` crate; see its documentation).

fn main() {
    std::process::exit(allot_lab::main());
}
