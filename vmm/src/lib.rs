//! pmemvm's VMM library (placeholder, being written).
