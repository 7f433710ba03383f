use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::Path;

use crate::engine::fingerprint::{self, Launch};

use super::marker::{line, lock_byte, ALIVE_BYTE};
use super::seen::parse;
use super::*;

/// The markers directory of `root`, created.
fn runs(root: &Path) -> std::io::Result<Runs> {
    let root = crate::cache::fsx::open_root(root)?;
    let state = crate::cache::fsx::open_state_dir_at(root.as_fd(), crate::STATE_DIR, Some(0o755))?;
    Runs::open_in(state.as_fd())
}

/// `fp`: a fingerprint in full, or a label standing for one.
fn id(fp: &str, peer: &str, rank: &str) -> Identity {
    use crate::digest::Fingerprint;
    Identity {
        fingerprint: Fingerprint::parse(fp).unwrap_or_else(|| Fingerprint::of(fp.as_bytes())),
        peer_key: peer.into(),
        rank: rank.into(),
    }
}

fn seen(i: Identity, state: State, life: Life) -> Seen {
    Seen {
        name: "1-1".into(),
        pid: 1,
        id: i,
        started: 1,
        state,
        life,
        host: "h".into(),
    }
}

#[test]
fn verdicts() {
    let me = id("a", "k", "-");
    let rows = [
        (seen(id("a", "k", "-"), State::Tuning, Life::Alive), "wait"),
        (seen(id("b", "x", "-"), State::Tuning, Life::Alive), "wait"),
        (seen(id("a", "k", "-"), State::Done, Life::Alive), "go"),
        (seen(id("b", "x", "-"), State::Done, Life::Alive), "beside"),
        (seen(id("a", "k", "-"), State::Tuning, Life::Ended), "go"),
        (
            seen(id("a", "k", "-"), State::Done, Life::Orphaned),
            "beside",
        ),
        (
            seen(id("b", "x", "-"), State::HandsOff, Life::Orphaned),
            "orphan",
        ),
        (
            seen(id("a", "k", "-"), State::Tuning, Life::Orphaned),
            "orphan",
        ),
        (
            seen(id("a", "k", "-"), State::HandsOff, Life::Alive),
            "handsoff",
        ),
        (
            seen(id("c", "k", "node-rank=1"), State::Tuning, Life::Alive),
            "peer",
        ),
        (seen(id("a", "k", "-"), State::Ended, Life::Alive), "go"),
    ];
    for (s, want) in rows {
        let list = [s.clone()];
        let got = match verdict(&me, &list) {
            Verdict::Go => "go",
            Verdict::Wait(_) => "wait",
            Verdict::HandsOff(Why::Peer, _) => "peer",
            Verdict::HandsOff(Why::Orphan, _) => "orphan",
            Verdict::HandsOff(Why::HandsOff, _) => "handsoff",
            Verdict::Beside(_) => "beside",
        };
        assert_eq!(got, want, "{s:?}");
    }
}

#[test]
fn verdicts_of_several_launches() {
    let me = id("a", "k", "-");
    let named = |name: &str, s: Seen| Seen {
        name: name.into(),
        ..s
    };
    let other_done = named("1-1", seen(id("b", "x", "-"), State::Done, Life::Alive));
    let replica_done = named("2-2", seen(id("a", "k", "-"), State::Done, Life::Alive));
    let replica_tuning = named("3-3", seen(id("a", "k", "-"), State::Tuning, Life::Alive));
    let orphan_done = named("4-4", seen(id("a", "k", "-"), State::Done, Life::Orphaned));
    let handsoff = named("5-5", seen(id("c", "y", "-"), State::HandsOff, Life::Alive));
    let names = |v: &Verdict<'_>| match v {
        Verdict::Beside(list) => list.iter().map(|s| s.name.clone()).collect(),
        _ => Vec::new(),
    };
    // A replica of this launch still tuning is waited for, whoever else
    // is done beside it.
    let list = [other_done.clone(), replica_tuning.clone()];
    assert_eq!(verdict(&me, &list), Verdict::Wait(&list[1]));
    // Done launches of other fingerprints and orphans done are gone around;
    // a replica done is shared with, not listed.
    let list = [
        other_done.clone(),
        replica_done.clone(),
        orphan_done.clone(),
    ];
    let v = verdict(&me, &list);
    assert_eq!(names(&v), ["1-1", "4-4"]);
    // A launch running hands-off never says when it is done.
    let list = [other_done.clone(), handsoff.clone()];
    assert_eq!(
        verdict(&me, &list),
        Verdict::HandsOff(Why::HandsOff, &list[1])
    );
    // An ended one is nobody.
    let ended = Seen {
        life: Life::Ended,
        ..other_done.clone()
    };
    assert_eq!(verdict(&me, &[ended, replica_done]), Verdict::Go);
}

#[test]
fn a_registered_marker_is_seen_alive_with_its_state_and_removed_at_drop() {
    let root = tempfile::tempdir().unwrap();
    let me = id(&"f".repeat(64), &"b".repeat(64), "-");
    let m = runs(root.path())
        .unwrap()
        .register(&me, State::Tuning)
        .unwrap();
    let runs = runs(root.path()).unwrap();
    let seen = runs.scan();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].life, seen[0].state, &seen[0].id),
        (Life::Alive, State::Tuning, &me)
    );
    assert_eq!(
        verdict(&id("f00d", "beef", "-"), &seen),
        Verdict::Wait(&seen[0])
    );
    m.mark_done();
    assert_eq!(runs.scan()[0].state, State::Done);
    assert!(m.others().is_empty(), "a launch does not see itself");
    drop(m);
    assert!(runs.scan().is_empty());
    // Its file is left as the spare, and nothing else.
    let dir = root.path().join(".keepwrap/running");
    assert_eq!(names(&dir), [".spare"]);
}

#[test]
fn a_marker_written_over_a_longer_spare_holds_its_own_line_only() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(".keepwrap/running");
    let long = id(&"f".repeat(64), &"b".repeat(64), &"node-rank=7,".repeat(20));
    let short = id(&"e".repeat(64), &"c".repeat(64), "-");
    let register = |i: &Identity| {
        runs(root.path())
            .unwrap()
            .register(i, State::Tuning)
            .unwrap()
    };
    drop(register(&long));
    let left = std::fs::read(dir.join(".spare")).unwrap();
    let m = register(&short);
    let text = std::fs::read(dir.join(&m.name)).unwrap();
    assert!(text.len() < left.len(), "the spare held the longer line");
    let started: u128 = m.name.split('-').nth(1).unwrap().parse().unwrap();
    assert_eq!(text, line(State::Tuning, &short, started));
    let seen = runs(root.path()).unwrap().scan();
    assert_eq!((seen.len(), &seen[0].id), (1, &short));
    // And the other way: a longer line over a shorter spare.
    drop(m);
    let m = register(&long);
    let started: u128 = m.name.split('-').nth(1).unwrap().parse().unwrap();
    assert_eq!(
        std::fs::read(dir.join(&m.name)).unwrap(),
        line(State::Tuning, &long, started)
    );
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn the_next_launch_takes_the_spare_file_unless_something_still_locks_it() {
    use std::os::unix::fs::MetadataExt;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(".keepwrap/running");
    let me = id(&"f".repeat(64), &"b".repeat(64), "-");
    let register = || {
        runs(root.path())
            .unwrap()
            .register(&me, State::Tuning)
            .unwrap()
    };
    drop(register());
    let spare = std::fs::metadata(dir.join(".spare")).unwrap().ino();
    // Taken: the same file, under the marker's name, alive and full.
    let m = register();
    assert_eq!(names(&dir), std::slice::from_ref(&m.name));
    assert_eq!(std::fs::metadata(dir.join(&m.name)).unwrap().ino(), spare);
    let seen = runs(root.path()).unwrap().scan();
    assert_eq!(
        (seen.len(), seen[0].life, seen[0].state),
        (1, Life::Alive, State::Tuning)
    );
    drop(m);
    // A straggler of the engine still holds the spare's byte 0: the
    // next launch makes a new file and the spare goes.
    let straggler = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(".spare"))
        .unwrap();
    lock_byte(straggler.as_fd(), ALIVE_BYTE).unwrap();
    let m = register();
    assert_eq!(names(&dir), std::slice::from_ref(&m.name));
    assert_ne!(std::fs::metadata(dir.join(&m.name)).unwrap().ino(), spare);
    assert_eq!(runs(root.path()).unwrap().scan()[0].life, Life::Alive);
    drop(m);
    drop(straggler);
}

#[test]
fn ranks_of_one_launch_are_peers_and_replicas_are_not() {
    let opts = fingerprint::Options {
        profile: fingerprint::ProfileName::Sglang,
        env_prefixes: vec![],
        volatile_env: vec![],
        ignored_args: vec![],
    };
    let identity = |argv: &[OsString]| {
        let launch = Launch::new(&opts, argv, &[]);
        let flags = &crate::engine::sglang::RANK_FLAGS;
        let ranks = crate::engine::rank_values(&launch.command().argv, flags);
        launch.identity(&[], flags, &ranks)
    };
    let of = |args: &[&str]| {
        let argv: Vec<OsString> = ["python3", "-m", "sglang.launch_server", "--tp", "2"]
            .iter()
            .chain(args)
            .map(OsString::from)
            .collect();
        identity(&argv)
    };
    let n0 = of(&["--nnodes", "2", "--node-rank", "0"]);
    let n1 = of(&["--nnodes", "2", "--node-rank=1"]);
    assert_ne!(n0.fingerprint, n1.fingerprint);
    assert!(n0.is_peer_of(&n1) && n1.is_peer_of(&n0));
    assert!(
        !n0.is_peer_of(&of(&["--nnodes", "2", "--node-rank", "0"])),
        "a replica"
    );
    let d0 = of(&["--data-parallel-rank", "0"]);
    let d1 = of(&["--data-parallel-rank", "1"]);
    assert!(d0.is_peer_of(&d1));
    assert!(!d0.is_peer_of(&of(&["--data-parallel-rank", "1", "--tp", "4"])));
    assert!(!of(&[]).is_peer_of(&of(&[])));
    // the engine's arguments, after a prefix's `--`
    let behind = |rank: &str| {
        let argv: Vec<OsString> = [
            "numactl",
            "-N",
            "0",
            "--",
            "python3",
            "-m",
            "sglang.launch_server",
            "--nnodes",
            "2",
            "--node-rank",
            rank,
        ]
        .map(OsString::from)
        .to_vec();
        identity(&argv)
    };
    assert_eq!(behind("1").rank, "node-rank=1");
    assert!(behind("0").is_peer_of(&behind("1")));
}

#[test]
fn a_marker_line_round_trips() {
    let i = id(&"f".repeat(64), &"b".repeat(64), "node-rank=1");
    let l = line(State::Done, &i, 42);
    let (j, started, state, _host) = parse("7-42", std::str::from_utf8(&l).unwrap()).unwrap();
    assert_eq!((j, started, state), (i, 42, State::Done));
    assert!(parse("junk", "tuning a 1 b c").is_none());
    let planted = format!("tuning {} 1 {} \u{1b}[2J h", "a".repeat(64), "b".repeat(64));
    assert!(parse("7-42", &planted).is_none(), "control characters");
    assert!(parse("7-42", "tuning \u{e9}\u{e9}\u{e9}\u{e9}\u{e9} 1 b - h").is_none());
    let unreleased = format!("{} 42", "c".repeat(64));
    assert!(parse("7-42", &unreleased).is_none(), "no other format");
    let upper = format!("tuning {} 1 {} - h", "A".repeat(64), "b".repeat(64));
    assert!(
        parse("7-42", &upper).is_none(),
        "no fingerprint keepwrap writes"
    );
}

#[test]
fn a_launch_started_beside_another_sees_it_as_long_as_it_lives_even_once_it_ended() {
    let root = tempfile::tempdir().unwrap();
    let a_id = id(&"a".repeat(64), &"a".repeat(64), "-");
    let b_id = id(&"b".repeat(64), &"b".repeat(64), "-");
    let a = runs(root.path())
        .unwrap()
        .register(&a_id, State::Tuning)
        .unwrap();
    a.mark_done();
    let seen = runs(root.path()).unwrap().scan();
    let v = verdict(&b_id, &seen);
    let Verdict::Beside(list) = &v else {
        panic!("{v:?}")
    };
    let beside: Vec<Seen> = list.iter().map(|s| (*s).clone()).collect();
    let mut b = runs(root.path())
        .unwrap()
        .register(&b_id, State::Tuning)
        .unwrap();
    b.ran_beside(beside);
    let live = b.others();
    assert_eq!(live.len(), 1);
    assert_eq!((live[0].life, &live[0].id), (Life::Alive, &a_id));
    // A ends (started before B: nobody needs its marker, it is removed).
    drop(a);
    assert!(runs(root.path())
        .unwrap()
        .scan()
        .iter()
        .all(|s| s.id != a_id));
    let after = b.others();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!((after[0].life, &after[0].id), (Life::Ended, &a_id));
    assert!(after[0].to_string().ends_with("ended)"), "{}", after[0]);
}
