//! Looking into a guest: the gdb stub, memory dumps, stack scans, kernel symbols.

pub mod dump;
pub mod gdb;
pub mod stack_scan;
pub mod symbols;
