//! `allot-lab`: the demo and the experiments, a binary apart from `allot`
//! (its code is this package's library; see its documentation). `allot
//! demo` and `allot bench` hand over to it when it is installed beside
//! `allot`.

fn main() {
    std::process::exit(allot_lab::main());
}
