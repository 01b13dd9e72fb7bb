//! The message table, round trips and bad input.
use super::frame::MAX_FRAME;
use super::*;
use proptest::prelude::*;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..12)
}

fn rank_spec() -> impl Strategy<Value = RankSpec> {
    (
        any::<u32>(),
        any::<u32>(),
        bytes(),
        proptest::collection::vec(bytes(), 0..3),
        proptest::collection::vec((bytes(), bytes()), 0..3),
        proptest::option::of(bytes()),
    )
        .prop_map(|(rank, local_rank, program, args, env, wdir)| RankSpec {
            rank,
            local_rank,
            program,
            args,
            env,
            wdir,
        })
}

fn to_agent() -> impl Strategy<Value = ToAgent> {
    prop_oneof![
        (
            ".{0,8}",
            any::<u64>(),
            any::<u64>(),
            bytes(),
            (any::<u8>(), any::<u8>(), any::<u32>(), any::<bool>()),
            proptest::collection::vec(rank_spec(), 0..3)
        )
            .prop_map(|(job_id, grace_ms, hb, cwd, (a, b, c, d), ranks)| {
                ToAgent::Job(JobSpec {
                    job_id,
                    grace_ms,
                    heartbeat_timeout_ms: hb,
                    cwd,
                    binding: BindingSpec {
                        bind_to: a,
                        map_by: b,
                        cpus_per_rank: c,
                        oversubscribe: d,
                    },
                    ranks,
                    mpi: MpiSpec {
                        choice: a,
                        node: c,
                        timeout_ms: hb,
                        hosts: vec![("h".into(), vec![c, 1])],
                        appnum: vec![0, c],
                    },
                })
            }),
        Just(ToAgent::Start),
        (any::<u32>(), any::<i32>()).prop_map(|(rank, signal)| ToAgent::Signal { rank, signal }),
        Just(ToAgent::Finish),
        Just(ToAgent::Ping),
        (
            any::<u32>(),
            any::<u64>(),
            bytes(),
            proptest::collection::vec(relay_host(), 0..3)
        )
            .prop_map(|(width, hb, remote_psyrun, hosts)| ToAgent::Reach {
                width,
                heartbeat_timeout_ms: hb,
                remote_psyrun,
                hosts,
            }),
        (any::<u32>(), bytes()).prop_map(|(host, body)| ToAgent::Relay { host, body }),
    ]
}

fn relay_host() -> impl Strategy<Value = RelayHost> {
    (
        (any::<u32>(), ".{0,8}", any::<bool>(), ".{0,8}", ".{0,8}"),
        (any::<u16>(), proptest::collection::vec(bytes(), 0..3)),
        (any::<u64>(), any::<u8>(), bytes()),
    )
        .prop_map(
            |((host, name, local, address, user), (port, identities), (ms, policy, kh))| {
                RelayHost {
                    host,
                    name,
                    local,
                    address,
                    user,
                    port,
                    identities,
                    connect_timeout_ms: ms,
                    policy,
                    known_hosts: kh,
                }
            },
        )
}

fn from_agent() -> impl Strategy<Value = FromAgent> {
    prop_oneof![
        (".{0,8}", ".{0,8}", any::<u32>(), any::<u16>()).prop_map(
            |(version, hostname, cores, free_port)| FromAgent::Hello {
                version,
                hostname,
                cores,
                free_port
            }
        ),
        proptest::collection::vec(".{0,8}", 0..3)
            .prop_map(|bindings| FromAgent::Ready { bindings }),
        (".{0,8}", any::<u8>()).prop_map(|(message, code)| FromAgent::Refused { message, code }),
        (any::<u32>(), any::<u32>()).prop_map(|(rank, pid)| FromAgent::Started { rank, pid }),
        (any::<u32>(), ".{0,8}", any::<u8>()).prop_map(|(rank, message, code)| {
            FromAgent::Failed {
                rank,
                message,
                code,
            }
        }),
        (any::<u32>(), 0u8..2, any::<u64>(), any::<bool>(), bytes()).prop_map(
            |(rank, stream, time_us, more, bytes)| FromAgent::Output {
                rank,
                stream,
                time_us,
                more,
                bytes
            }
        ),
        (any::<u32>(), any::<i32>(), 0u8..3, ".{0,8}").prop_map(|(rank, v, k, why)| {
            FromAgent::Exited {
                rank,
                ended: match k {
                    0 => Termination::Exited(v),
                    1 => Termination::Signaled(v),
                    _ => Termination::Unknown(why),
                },
            }
        }),
        Just(FromAgent::Done),
        Just(FromAgent::Ping),
        (
            any::<u32>(),
            any::<bool>(),
            ".{0,8}",
            proptest::option::of(".{0,8}")
        )
            .prop_map(|(host, ok, via, peer)| FromAgent::Reached {
                host,
                outcome: if ok {
                    Ok(RelayRoute { via, peer })
                } else {
                    Err(via)
                },
            }),
        (any::<u32>(), bytes()).prop_map(|(host, body)| FromAgent::Relayed { host, body }),
        (any::<u32>(), ".{0,8}").prop_map(|(host, line)| FromAgent::Said { host, line }),
        (any::<u32>(), ".{0,8}", proptest::option::of(any::<i32>()))
            .prop_map(|(host, why, status)| FromAgent::Closed { host, why, status }),
        (any::<u32>(), proptest::option::of(any::<i32>()))
            .prop_map(|(rank, signal)| FromAgent::Paused { rank, signal }),
        (any::<u32>(), any::<i32>(), ".{0,8}").prop_map(|(rank, code, message)| {
            FromAgent::Aborted {
                rank,
                code,
                message,
            }
        }),
    ]
}

proptest! {
    #[test]
    fn messages_to_agents_survive_the_trip(msg in to_agent(), split in 0usize..64) {
        let frame = msg.encode();
        let mut r = FrameReader::new();
        let cut = split.min(frame.len());
        r.feed(&frame[..cut]);
        if cut < frame.len() {
            prop_assert_eq!(r.next_frame().unwrap(), None);
        }
        r.feed(&frame[cut..]);
        let body = r.next_frame().unwrap().unwrap();
        prop_assert_eq!(ToAgent::decode(&body).unwrap(), msg);
        prop_assert!(!r.is_mid_frame());
    }

    #[test]
    fn messages_from_agents_survive_the_trip(msgs in proptest::collection::vec(from_agent(), 1..5)) {
        let mut r = FrameReader::new();
        for m in &msgs {
            r.feed(&m.encode());
        }
        for m in &msgs {
            let body = r.next_frame().unwrap().unwrap();
            prop_assert_eq!(&FromAgent::decode(&body).unwrap(), m);
        }
        prop_assert_eq!(r.next_frame().unwrap(), None);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic(body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = ToAgent::decode(&body);
        let _ = FromAgent::decode(&body);
    }

    #[test]
    fn a_cut_frame_is_an_error(msg in to_agent()) {
        let frame = msg.encode();
        let body = &frame[4..];
        for cut in 0..body.len() {
            prop_assert!(ToAgent::decode(&body[..cut]).is_err());
        }
    }
}

#[test]
fn stray_bytes_and_huge_frames_are_refused() {
    let mut body = ToAgent::Ping.encode()[4..].to_vec();
    body.push(0);
    assert!(ToAgent::decode(&body).unwrap_err().0.contains("stray"));
    let mut r = FrameReader::new();
    r.feed(&(MAX_FRAME as u32 + 1).to_le_bytes());
    assert!(r.next_frame().unwrap_err().0.contains("agent's stdout"));
    // A list count larger than the frame is refused before allocating.
    let mut lying = vec![2u8];
    lying.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(FromAgent::decode(&lying)
        .unwrap_err()
        .0
        .contains("do not fit"));
}

/// The byte format is fixed: these frames were written by the hand-written codec this table
/// replaced.
#[test]
fn frames_keep_their_bytes() {
    let job = ToAgent::Job(JobSpec {
        job_id: "j1".into(),
        grace_ms: 2,
        heartbeat_timeout_ms: 3,
        cwd: b"/w".to_vec(),
        binding: BindingSpec {
            bind_to: 1,
            map_by: 2,
            cpus_per_rank: 3,
            oversubscribe: true,
        },
        ranks: vec![RankSpec {
            rank: 4,
            local_rank: 0,
            program: b"p".to_vec(),
            args: vec![b"a".to_vec()],
            env: vec![(b"K".to_vec(), b"V".to_vec())],
            wdir: Some(b"/d".to_vec()),
        }],
        mpi: MpiSpec {
            choice: 1,
            node: 0,
            timeout_ms: 5,
            hosts: vec![("h".into(), vec![4])],
            appnum: vec![0],
        },
    });
    let reached = FromAgent::Reached {
        host: 2,
        outcome: Ok(RelayRoute {
            via: "local".into(),
            peer: Some("x".into()),
        }),
    };
    let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(
        hex(job.encode()),
        "7900000001020000006a3102000000000000000300000000000000020000002f770102030000000101\
         0000000400000000000000010000007001000000010000006101000000010000004b01000000560102\
         0000002f640100000000050000000000000001000000010000006801000000040000000100000000000000"
    );
    let exited = FromAgent::Exited {
        rank: 3,
        ended: Termination::Signaled(9),
    };
    assert_eq!(hex(exited.encode()), "0a00000007030000000109000000");
    assert_eq!(
        hex(reached.encode()),
        "150000000a0200000001050000006c6f63616c010100000078"
    );
}
