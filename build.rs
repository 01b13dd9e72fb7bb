//! Build script of the `psyne` package. Without the `mpi` feature it does nothing. With it, it
//! compiles `src/mpi/in_place.c` against the system MPI's `mpi.h`, found the way the `mpi` crate
//! finds it (`build-probe-mpi`: `mpicc`, else pkg-config), so the MPI backend can pass
//! `MPI_IN_PLACE`, whose value is the MPI library's choice.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/mpi/in_place.c");
    #[cfg(feature = "mpi")]
    mpi_shim::build();
}

#[cfg(feature = "mpi")]
mod mpi_shim {
    pub fn build() {
        let lib = match build_probe_mpi::probe() {
            Ok(lib) => lib,
            Err(errors) => {
                for e in &errors {
                    println!("cargo:warning=looking for MPI: {e}");
                }
                panic!(
                    "the `mpi` feature needs an MPI library with its headers (Debian: \
                     libopenmpi-dev, or run scripts/setup.sh); none was found"
                );
            }
        };
        let mut build = cc::Build::new();
        build.file("src/mpi/in_place.c");
        match &lib.mpicc {
            Some(mpicc) => {
                build.compiler(mpicc);
            }
            None => {
                for dir in &lib.include_paths {
                    build.include(dir);
                }
            }
        }
        build.compile("psyne_mpi_in_place");
    }
}
