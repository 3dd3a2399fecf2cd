//! pmemvm's VMM library (being written).

pub mod fio;
pub mod layout;
pub mod report;
