//! What a result directory says about itself: its schema and pmemvm
//! versions, which part of a bench it holds and whether it is complete
//! ([`record`]), and the bench task (`--only SIDE:BOOT`) it ran ([`task`]).
//! A leaf module: written by [`crate::study::bench`] and [`crate::guest::run`], shown by
//! [`crate::study::report`], read back by [`crate::study::fleet`].

pub mod record;
pub mod task;
