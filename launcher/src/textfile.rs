//! Reading a text file a user named (a hostfile, an SSH config, a psybench preset or report):
//! psyne's bounded reader, [`psyne::textfile`], which the library uses for tuning files too (one
//! reader for the same rule).

pub use psyne::textfile::{read, read_regular};
