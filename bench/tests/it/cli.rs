//! The command line and presets: parsing, defaults, precedence, errors, the spawn flag.

use crate::common;

use psybench::cli::{parse_from, strip_spawn_flag, Command};
use psybench::config;
use psybench::model::{Backend, BenchColl, Cadence, Sweep};
use psyne::{Algo, DType, ReduceOp};
use std::path::{Path, PathBuf};

fn sweep_of(args: &[&str]) -> (Option<usize>, Sweep) {
    let mut full = vec!["psybench"];
    full.extend_from_slice(args);
    match parse_from(full).unwrap() {
        Command::Sweep { ranks, sweep } => (ranks, sweep),
        other => panic!("not a sweep: {other:?}"),
    }
}

fn error_of(args: &[&str]) -> (String, i32) {
    let mut full = vec!["psybench"];
    full.extend_from_slice(args);
    let e = parse_from(full).unwrap_err();
    (e.to_string(), e.exit_code())
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn defaults() {
    let (ranks, s) = sweep_of(&["allreduce"]);
    assert_eq!(ranks, None);
    assert_eq!(s.collectives, vec![BenchColl::AllReduce]);
    assert_eq!(s.sizes.len(), 26);
    assert_eq!((s.sizes[0], *s.sizes.last().unwrap()), (8, 256 << 20));
    assert_eq!((s.dtype, s.op, s.root), (DType::F32, ReduceOp::Sum, 0));
    assert_eq!(s.algos, vec![None]);
    assert_eq!(s.transport, "auto");
    assert_eq!((s.iters, s.warmup, s.rounds), (None, None, 1));
    assert!(!s.in_place && s.check);
    assert_eq!(s.cadence, Cadence::Stream);
    assert_eq!(s.backends, vec![Backend::Native]);
    assert_eq!(
        (s.csv, s.json, s.plot, s.peak_gbps),
        (None, None, None, None)
    );
    // Barrier alone: one row, no sizes to sweep.
    assert_eq!(sweep_of(&["barrier"]).1.sizes, vec![0]);
    assert_eq!(sweep_of(&["all"]).1.collectives, BenchColl::ALL.to_vec());
}

#[test]
fn every_flag() {
    let (ranks, s) = sweep_of(&[
        "-n",
        "4",
        "broadcast",
        "--sizes",
        "8,1K,1M",
        "--dtype",
        "i32",
        "--op",
        "max",
        "--root",
        "3",
        "--algo",
        "pipeline,tree",
        "--transport",
        "tcp",
        "--iters",
        "7",
        "--warmup",
        "1",
        "--rounds",
        "3",
        "--in-place",
        "--cadence",
        "osu",
        "--no-check",
        "--csv",
        "r.csv",
        "--json",
        "r.json",
        "--plot",
        "r.png",
        "--peak",
        "12.5",
    ]);
    assert_eq!(ranks, Some(4));
    assert_eq!(s.sizes, vec![8, 1024, 1 << 20]);
    assert_eq!((s.dtype, s.op, s.root), (DType::I32, ReduceOp::Max, 3));
    assert_eq!(s.algos, vec![Some(Algo::Pipeline), Some(Algo::Binomial)]);
    assert_eq!(s.transport, "tcp");
    assert_eq!((s.iters, s.warmup, s.rounds), (Some(7), Some(1), 3));
    assert!(s.in_place && !s.check);
    assert_eq!(s.cadence, Cadence::Osu);
    assert_eq!(s.csv, Some(PathBuf::from("r.csv")));
    assert_eq!(s.json, Some(PathBuf::from("r.json")));
    assert_eq!(s.plot, Some(PathBuf::from("r.png")));
    assert_eq!(s.peak_gbps, Some(12.5));
    // -n after the subcommand, --np=N, nccl-tests type names, factor.
    let (ranks, s) = sweep_of(&[
        "allgather",
        "--np=3",
        "--dtype",
        "double",
        "--sizes",
        "1K:16K",
        "--factor",
        "4",
    ]);
    assert_eq!(ranks, Some(3));
    assert_eq!(s.dtype, DType::F64);
    assert_eq!(s.sizes, vec![1024, 4096, 16384]);
}

#[test]
fn sizes_round_up_to_whole_elements() {
    let (_, s) = sweep_of(&["allreduce", "--sizes", "1,2,3,5,1K", "--dtype", "f64"]);
    assert_eq!(s.sizes, vec![8, 1024]);
}

#[test]
fn usage_errors_name_the_fix() {
    let (e, code) = error_of(&["allreduce", "--sizes", "64M:8"]);
    assert_eq!(code, 2);
    assert!(
        e.starts_with("error: invalid value '64M:8' for --sizes"),
        "{e}"
    );
    assert!(e.contains("--sizes 8:64M"), "{e}");
    assert!(e.contains("Usage: psybench allreduce"), "{e}");
    let (e, _) = error_of(&["allreduce", "--sizes", "1X"]);
    assert!(e.contains("unknown size suffix"), "{e}");
    let (e, _) = error_of(&["allreduce", "--factor", "0"]);
    assert!(e.contains("greater than 1"), "{e}");
    let (e, _) = error_of(&["allreduce", "--algo", "pipeline"]);
    assert!(
        e.contains("does not implement allreduce") && e.contains("ring"),
        "{e}"
    );
    let (e, _) = error_of(&["allreduce", "--algo", "bogus"]);
    assert!(e.contains("unknown algorithm `bogus`"), "{e}");
    let (e, _) = error_of(&["sendrecv", "--algo", "ring"]);
    assert!(e.contains("no algorithm choice"), "{e}");
    let (e, _) = error_of(&["allreduce", "--op", "band"]);
    assert!(e.contains("bitwise") && e.contains("--dtype i32"), "{e}");
    let (e, _) = error_of(&["allreduce", "--dtype", "f7"]);
    assert!(e.contains("unknown type `f7`") && e.contains("bf16"), "{e}");
    let (e, _) = error_of(&["allreduce", "--cadence", "burst"]);
    assert!(
        e.contains("stream") && e.contains("isolated") && e.contains("osu"),
        "{e}"
    );
    let (e, _) = error_of(&["allreduce", "--transport", "carrier-pigeon"]);
    assert!(e.contains("auto, tcp or shm"), "{e}");
    let (e, _) = error_of(&["allreduce", "--rounds", "0"]);
    assert!(e.contains("at least one round"), "{e}");
    let (e, _) = error_of(&["allreduce", "--iters", "0"]);
    assert!(e.contains("at least one"), "{e}");
    let (e, _) = error_of(&["allreduce", "--peak=-1"]);
    assert!(e.contains("greater than 0"), "{e}");
    let (e, _) = error_of(&["allreduce", "--backend", "nccl"]);
    assert!(e.contains("unknown backend `nccl`"), "{e}");
    let (e, code) = error_of(&["allreduce", "--bogus"]);
    assert_eq!(code, 2);
    assert!(e.contains("--bogus"), "{e}");
    // A bitwise op is fine where nothing reduces, and with integers.
    sweep_of(&["broadcast", "--op", "band"]);
    sweep_of(&["allreduce", "--op", "bxor", "--dtype", "u64"]);
    // Across several operations an algorithm must fit at least one.
    sweep_of(&["all", "--algo", "ring,pipeline"]);
    sweep_of(&["all", "--algo", "dissemination,ring"]);
    let (e, _) = error_of(&["check", "allgather", "reducescatter", "--algo", "pipeline"]);
    assert!(e.contains("implements none of the operations"), "{e}");
}

#[test]
fn hier_is_an_algorithm_of_allreduce_broadcast_and_allgather() {
    let (_, s) = sweep_of(&["allreduce", "--algo", "ring,hier"]);
    assert_eq!(s.algos, vec![Some(Algo::Ring), Some(Algo::Hier)]);
    sweep_of(&["broadcast", "--algo", "hier"]);
    sweep_of(&["allgather", "--algo", "hier"]);
    let (e, _) = error_of(&["reducescatter", "--algo", "hier"]);
    assert!(e.contains("does not implement reducescatter"), "{e}");
}

#[test]
fn mpi_backend_needs_the_feature() {
    let args = ["psybench", "allreduce", "--backend", "native,mpi"];
    let r = parse_from(args);
    if cfg!(feature = "mpi") {
        assert!(r.is_ok());
    } else {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("--features mpi"), "{e}");
    }
}

#[test]
fn help_and_version_exit_zero() {
    let e = parse_from(["psybench", "--help"]).unwrap_err();
    assert_eq!(e.exit_code(), 0);
    assert!(e.message().contains("allreduce") && e.message().contains("Examples"));
    let e = parse_from(["psybench", "allreduce", "--help"]).unwrap_err();
    assert_eq!(e.exit_code(), 0);
    assert!(e.message().contains("--sizes"));
    let e = parse_from(["psybench", "--version"]).unwrap_err();
    assert_eq!(e.exit_code(), 0);
    // Nothing at all: help, as a usage error.
    assert_eq!(parse_from(["psybench"]).unwrap_err().exit_code(), 2);
}

#[test]
fn other_subcommands() {
    match parse_from(["psybench", "plot", "native.json", "mpi.json", "-o", "c.png"]).unwrap() {
        Command::Plot { inputs, output } => {
            assert_eq!(
                inputs,
                vec![PathBuf::from("native.json"), PathBuf::from("mpi.json")]
            );
            assert_eq!(output, PathBuf::from("c.png"));
        }
        other => panic!("{other:?}"),
    }
    match parse_from(["psybench", "plot", "dir/run.csv"]).unwrap() {
        Command::Plot { output, .. } => assert_eq!(output, PathBuf::from("dir/run.png")),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        parse_from(["psybench", "plot", "a.png"])
            .unwrap_err()
            .exit_code(),
        2
    );
    assert_eq!(
        parse_from(["psybench", "compare", "a.json", "b.json"]).unwrap(),
        Command::Compare {
            a: "a.json".into(),
            b: Some("b.json".into())
        }
    );
    assert_eq!(
        parse_from(["psybench", "compare", "run.json"]).unwrap(),
        Command::Compare {
            a: "run.json".into(),
            b: None
        }
    );
    assert_eq!(
        parse_from(["psybench", "peak", "--size", "64M"]).unwrap(),
        Command::Peak {
            bytes: Some(64 << 20),
            iters: None
        }
    );
    match parse_from(["psybench", "-n", "2", "check", "--sizes", "1,1K,64K"]).unwrap() {
        Command::Check { ranks, sweep } => {
            assert_eq!(ranks, Some(2));
            assert!(sweep.check);
            assert_eq!(sweep.collectives, BenchColl::ALL.to_vec());
            assert_eq!(sweep.sizes, vec![4, 1024, 65536]);
        }
        other => panic!("{other:?}"),
    }
    match parse_from(["psybench", "check", "allreduce", "all-gather"]).unwrap() {
        Command::Check { sweep, .. } => {
            assert_eq!(
                sweep.collectives,
                vec![BenchColl::AllReduce, BenchColl::AllGather]
            );
            assert_eq!(sweep.sizes, vec![4, 1024, 65536, 1 << 20]);
        }
        other => panic!("{other:?}"),
    }
}

fn write_preset(name: &str, text: &str) -> PathBuf {
    let dir = common::temp_dir(name);
    let p = dir.join("preset.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn config_unknown_key_is_named() {
    let p = write_preset("cfg-unknown", "sizes = \"8:1K\"\nsizez = \"8:1M\"\n");
    let e = config::load(&p).unwrap_err().to_string();
    assert!(e.contains("sizez") && e.contains("preset.toml"), "{e}");
    let (e, code) = error_of(&["allreduce", "--config", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(e.contains("unknown field `sizez`"), "{e}");
    // A wrong type names the key too.
    let p = write_preset("cfg-type", "iters = \"many\"\n");
    let e = config::load(&p).unwrap_err().to_string();
    assert!(e.contains("iters"), "{e}");
    // A bad value names the key and the file.
    let p = write_preset(
        "cfg-value",
        "collective = \"allreduce\"\nsizes = \"64M:8\"\n",
    );
    let (e, _) = error_of(&["--config", p.to_str().unwrap()]);
    assert!(
        e.contains("`sizes` in") && e.contains("preset.toml") && e.contains("backwards"),
        "{e}"
    );
    let (e, _) = error_of(&["--config", "/nonexistent/psybench.toml", "allreduce"]);
    assert!(e.contains("cannot read config file"), "{e}");
}

#[test]
fn flags_win_over_the_config() {
    let p = write_preset(
        "cfg-prec",
        "collective = \"broadcast\"\nnp = 3\nsizes = [8, \"1K\"]\nalgo = \"pipeline\"\n\
         iters = 9\ndtype = \"f64\"\nin-place = true\nno-check = true\ncadence = \"isolated\"\n\
         backend = [\"native\"]\njson = \"cfg.json\"\npeak = 10\n",
    );
    let cfg = p.to_str().unwrap();
    // The file alone names the operation.
    let (ranks, s) = sweep_of(&["--config", cfg]);
    assert_eq!(ranks, Some(3));
    assert_eq!(s.collectives, vec![BenchColl::Broadcast]);
    assert_eq!(s.sizes, vec![8, 1024]);
    assert_eq!(s.algos, vec![Some(Algo::Pipeline)]);
    assert_eq!((s.iters, s.dtype), (Some(9), DType::F64));
    assert!(s.in_place && !s.check);
    assert_eq!(s.cadence, Cadence::Isolated);
    assert_eq!(s.json, Some(PathBuf::from("cfg.json")));
    assert_eq!(s.peak_gbps, Some(10.0));
    // Flags win; the subcommand wins over `collective`.
    let (ranks, s) = sweep_of(&[
        "-n",
        "2",
        "broadcast",
        "--config",
        cfg,
        "--sizes",
        "64K",
        "--iters",
        "3",
        "--algo",
        "tree",
        "--json",
        "flag.json",
    ]);
    assert_eq!(ranks, Some(2));
    assert_eq!(s.sizes, vec![65536]);
    assert_eq!(s.iters, Some(3));
    assert_eq!(s.algos, vec![Some(Algo::Binomial)]);
    assert_eq!(s.json, Some(PathBuf::from("flag.json")));
    assert_eq!(s.dtype, DType::F64, "unset flags keep the file's value");
    // A file without `collective` needs a subcommand.
    let p = write_preset("cfg-nocoll", "sizes = \"8:1K\"\n");
    let (e, _) = error_of(&["--config", p.to_str().unwrap()]);
    assert!(e.contains("collective = "), "{e}");
}

#[test]
fn shipped_presets_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    for name in ["quick.toml", "allreduce-256M.toml", "tcp-vs-mpi.toml"] {
        let p = dir.join(name);
        let f = config::load(&p).unwrap_or_else(|e| panic!("{e}"));
        assert!(f.collective.is_some(), "{name}");
        let r = parse_from(["psybench", "--config", p.to_str().unwrap()]);
        if name == "tcp-vs-mpi.toml" && !cfg!(feature = "mpi") {
            assert!(r.unwrap_err().to_string().contains("--features mpi"));
        } else {
            r.unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn spawn_flag_is_stripped() {
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["psybench", "-n", "4", "allreduce", "--sizes", "8:1K"],
            &["psybench", "allreduce", "--sizes", "8:1K"],
        ),
        (
            &["psybench", "-n4", "allreduce"],
            &["psybench", "allreduce"],
        ),
        (
            &["psybench", "allreduce", "--np", "2", "--json", "r.json"],
            &["psybench", "allreduce", "--json", "r.json"],
        ),
        (&["psybench", "--np=2", "all"], &["psybench", "all"]),
        (&["psybench", "-n=2", "all"], &["psybench", "all"]),
        (
            &["psybench", "all", "--", "-n", "2"],
            &["psybench", "all", "--", "-n", "2"],
        ),
    ];
    for (input, want) in cases {
        assert_eq!(
            strip_spawn_flag(&strings(input)),
            strings(want),
            "{input:?}"
        );
    }
    // What remains parses without -n.
    let left = strip_spawn_flag(&strings(&["psybench", "-n", "4", "allreduce"]));
    assert!(matches!(
        parse_from(left).unwrap(),
        Command::Sweep { ranks: None, .. }
    ));
}

/// psybench run with `args` as a process (its memory capped at 1 GiB, so a read that never ends
/// fails fast), at most 30 s: its exit code and stderr.
fn psybench_process(args: &[&str]) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let lim = libc::rlimit {
        rlim_cur: 1 << 30,
        rlim_max: 1 << 30,
    };
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_psybench"));
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: the hook makes one async-signal-safe system call (setrlimit) with a limit built
    // before the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_AS, &lim) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("starting psybench");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("psybench {args:?} ran over 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (status.code(), err)
}

#[test]
fn devices_binary_and_huge_input_files_are_refused_saying_what_and_where() {
    for args in [
        &["allreduce", "--config", "/dev/urandom"][..],
        &["plot", "/dev/urandom", "-o", "/tmp/psybench-never.png"],
        &["compare", "/dev/zero"],
    ] {
        let (code, err) = psybench_process(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("it is a character device"), "{args:?}: {err}");
    }
    /// Removes the directory even when the test fails.
    struct Removed(PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = Removed(common::temp_dir("input-files"));
    let dir = &dir.0;
    let preset = dir.join("p.toml");
    std::fs::write(&preset, b"np = 2\n# \xff\xfe\n").unwrap();
    let (code, err) = psybench_process(&["allreduce", "--config", preset.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("line 2 is not text"), "{err}");
    let report = dir.join("r.json");
    // Sparse: no disk used.
    std::fs::File::create(&report)
        .and_then(|f| f.set_len((256 << 20) + 1))
        .unwrap();
    let (code, err) = psybench_process(&["compare", report.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("larger than 256 MiB"), "{err}");
}

#[test]
fn tune_defaults_to_every_collective_at_factor_four_and_refuses_what_it_chooses_itself() {
    let parsed = parse_from(["psybench", "-n", "2", "tune", "-o", "/tmp/t"]).unwrap();
    let Command::Tune {
        ranks,
        sweep,
        options,
    } = parsed
    else {
        panic!("not a tune: {parsed:?}");
    };
    assert_eq!(ranks, Some(2));
    assert!(!sweep.collectives.contains(&BenchColl::SendRecv));
    assert_eq!(sweep.collectives.len(), BenchColl::ALL.len() - 1);
    assert_eq!(sweep.sizes.first(), Some(&8));
    assert_eq!(sweep.sizes.get(1), Some(&32));
    assert_eq!(sweep.sizes.last(), Some(&(32 << 20)));
    assert_eq!(sweep.rounds, 3);
    assert_eq!(options.output.as_deref(), Some(Path::new("/tmp/t")));
    assert!((options.margin - 0.05).abs() < 1e-12);
    for (args, says) in [
        (&["tune", "--algo", "ring"][..], "--algo"),
        (&["tune", "--backend", "mpi"][..], "--backend"),
        (&["tune", "--plot", "x.png"][..], "--plot"),
        (&["tune", "--margin", "100"][..], "--margin"),
        (&["tune", "sendrecv"][..], "sendrecv has no algorithms"),
        (&["tune", "allsum"][..], "unknown operation"),
    ] {
        let (msg, code) = error_of(args);
        assert_eq!(code, 2, "{args:?}: {msg}");
        assert!(msg.contains(says), "{args:?}: {msg}");
    }
}

#[test]
fn a_sweep_of_more_than_a_thousand_sizes_is_refused_before_it_runs_naming_the_count_and_the_fix() {
    // The mistyped factor of the report: about 120,000 sizes, hours of measuring.
    let (code, err) = psybench_process(&["allreduce", "--sizes", "1:1G", "--factor", "1.0001"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("1:1G with --factor 1.0001 makes about 1")
            && err.contains(" sizes, more than the 1000 one sweep may have"),
        "{err}"
    );
    assert!(
        err.contains("use a larger --factor (--factor 1.03 covers this range")
            && err.contains("--factor 2 in 31")
            && err.contains("or a narrower --sizes"),
        "{err}"
    );
    // The factor it names fits; the same sweep from a preset is refused the same way.
    let fits = sweep_of(&["allreduce", "--sizes", "1:1G", "--factor", "1.03"]).1;
    assert!(fits.sizes.len() <= 1000, "{}", fits.sizes.len());
    let dir = std::env::temp_dir().join(format!("psybench-many-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let preset = dir.join("fine.toml");
    std::fs::write(
        &preset,
        "collective = \"allreduce\"\nsizes = \"8:1T\"\nfactor = 1.000001\n",
    )
    .unwrap();
    let (code, err) = psybench_process(&["--config", preset.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("8:1T with --factor 1.000001 makes about"),
        "{err}"
    );
    // A list: 1000 sizes run, 1001 do not.
    let list = |n: u64| {
        (1..=n)
            .map(|i| (8 * i).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(
        sweep_of(&["allreduce", "--sizes", &list(1000)])
            .1
            .sizes
            .len(),
        1000
    );
    let (e, code) = error_of(&["allreduce", "--sizes", &list(1001)]);
    assert_eq!(code, 2);
    assert!(
        e.contains("the list has 1,001 sizes, more than the 1000"),
        "{e}"
    );
}

#[test]
fn reduce_orders_from_flags_and_presets() {
    use psyne::ReduceOrder::{Canonical, Fast};
    assert!(sweep_of(&["allreduce"]).1.reduce_orders.is_empty());
    let (_, s) = sweep_of(&["allreduce", "--reduce-order", "canonical"]);
    assert_eq!(s.reduce_orders, vec![Canonical]);
    let (_, s) = sweep_of(&["allreduce", "--reduce-order", "fast,canonical"]);
    assert_eq!(s.reduce_orders, vec![Fast, Canonical]);
    let (e, code) = error_of(&["allreduce", "--reduce-order", "exact"]);
    assert_eq!(code, 2);
    assert!(e.contains("reduce-order") && e.contains("canonical"), "{e}");
    let (e, _) = error_of(&["allreduce", "--reduce-order", "fast,fast"]);
    assert!(e.contains("twice"), "{e}");
    let p = write_preset("cfg-order", "reduce-order = [\"canonical\", \"fast\"]\n");
    let (_, s) = sweep_of(&["allreduce", "--config", p.to_str().unwrap()]);
    assert_eq!(s.reduce_orders, vec![Canonical, Fast]);
}

#[test]
fn model_takes_a_known_machine_and_refuses_others_by_name() {
    assert_eq!(
        parse_from(["psybench", "model", "--ranks", "64", "--sizes", "64K,1M"]).unwrap(),
        Command::Model {
            machine: "epyc-9654-2s".into(),
            ranks: Some(64),
            sizes: vec![64 << 10, 1 << 20],
            csv: None,
        }
    );
    let (e, code) = error_of(&["model", "--machine", "m1-ultra"]);
    assert_eq!(code, 2);
    assert!(e.contains("m1-ultra") && e.contains("xeon-8480-2s"), "{e}");
    let (e, code) = error_of(&["model", "--sizes", "1M:64K"]);
    assert_eq!(code, 2);
    assert!(e.contains("backwards"), "{e}");
}
