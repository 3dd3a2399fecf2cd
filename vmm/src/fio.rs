//! fio JSON output parsing (being written).
