//! Benchmark reports (being written).
