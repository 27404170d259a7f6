//! The lab's processes, whoever starts them (the bench, the demos, `up`): the [`supervisor`]
//! that owns every child and stops them all however the lab ends, [`ports`] (ports on
//! 127.0.0.1 held for the children that will bind them), [`procfs`] (CPU time and memory
//! from `/proc`), [`proxies`] (`hopwise proxy` processes and their `/metrics`) and [`parent`]
//! (children that die with their parent).
//! Nothing here knows which job it serves.

pub mod parent;
pub mod ports;
pub mod procfs;
pub mod proxies;
pub mod supervisor;
