//! `helix-server`: the Helix broker binary.

mod group;

fn main() {
    eprintln!("helix-server: the broker is not built yet (see the open issues)");
    std::process::exit(2);
}
