//! Devices of pmemvm (placeholder, being written).
