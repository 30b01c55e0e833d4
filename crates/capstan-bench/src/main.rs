//! Benchmark drivers for Capstan (being written).
fn main() {}
