//! The lab: each published report's measurement reproduced on this host
//! ([`model::Lab`]), its tables and comparisons with the report's figures,
//! its plots as SVG ([`plot`]) and one HTML page of it all ([`html`]).

pub mod dmbc;
pub mod fallback;
pub mod html;
pub mod model;
pub mod numa;
pub mod oltp;
pub mod pagetables;
pub mod plot;
pub mod pools;
pub mod reports;
pub mod startup;
