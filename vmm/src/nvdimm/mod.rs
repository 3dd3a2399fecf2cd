//! NVDIMMs: identity, labels, media errors, machine checks, flush recording, hot-add.

pub mod dimm;
pub mod dimm_fault;
pub mod hotplug;
pub mod identity;
pub mod label_index;
pub mod mce;
pub mod media;
pub mod record;
