//! ACPI tables for pmemvm guests (placeholder, being written).
#![forbid(unsafe_code)]
