//! Server-side apply and field management (`metadata.managedFields`), as upstream's
//! structured-merge-diff and field manager define them, for the built-in kinds and custom
//! resources.
//!
//! - [`schema`]: the merge structure of each type (which lists are keyed, sets or atomic, which
//!   objects are atomic), from the protobuf schema table and upstream's markers.
//! - [`custom`]: the same structure read from a custom resource's structural schema.
//! - [`fieldpath`]: field paths and sets, and their `FieldsV1` form.
//! - [`typed`]: merge, compare, field sets and removal over that structure.
//! - [`managed`]: the managed-fields entries and the update and apply operations, with
//!   conflicts.

pub mod custom;
pub mod fieldpath;
pub mod managed;
#[rustfmt::skip]
mod markers;
pub mod schema;
pub mod typed;
