//! Launcher prefixes: programs that set something up and then exec the
//! command after their options (`numactl --cpunodebind=0 python3 ...`,
//! `nice -n 5 ...`, `env -u X A=1 ...`, NVIDIA's image entrypoint). Each is
//! read with its real option grammar (GNU `getopt_long` with a leading `+`:
//! options end at the first word that is none, or after `--`; long names
//! exactly as spelled, never abbreviated), and an option outside that
//! grammar is not guessed: the prefix is then unreadable, with the reason.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// What a prefix does before it execs the command at `command_at`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prefix {
    /// The program's name (`numactl`, `env`, ...).
    pub name: &'static str,
    /// Index in argv of the command it runs.
    pub command_at: usize,
    /// `env -i`: the command's environment is only the assignments.
    pub clear_env: bool,
    /// `env -u NAME`: names taken out of the environment.
    pub unset: Vec<OsString>,
    /// `env NAME=value`: the command's environment, in the order given.
    pub assigns: Vec<(OsString, OsString)>,
    /// `env -C DIR`: the command's working directory.
    pub chdir: Option<OsString>,
    /// Why the prefix's exit status does not prove the engine's.
    pub exit_unproven: Option<&'static str>,
}

/// Why a prefix cannot be read: the reason, naming the prefix.
pub type Refused = String;

/// One program's options, as its `getopt_long` reads them.
struct Grammar {
    name: &'static str,
    /// short options without a value
    flags: &'static [u8],
    /// short options with a value (attached or the next word)
    valued: &'static [u8],
    /// long options without a value
    long_flags: &'static [&'static str],
    /// long options with a value (`--name=V` or `--name V`)
    long_valued: &'static [&'static str],
}

/// An option read: its short letter or long name, and its value.
#[derive(Debug)]
struct Opt {
    name: String,
    value: Option<Vec<u8>>,
}

impl Grammar {
    /// The options from `argv[start]` on, and where the first word that is
    /// no option sits (after a `--`).
    fn read(&self, argv: &[OsString], start: usize) -> Result<(Vec<Opt>, usize), Refused> {
        let mut out = Vec::new();
        let mut i = start;
        while let Some(w) = argv.get(i).map(|a| a.as_bytes()) {
            if w == b"--" {
                return Ok((out, i + 1));
            }
            if let Some(long) = w.strip_prefix(b"--") {
                let (name, value) = match long.iter().position(|&b| b == b'=') {
                    Some(p) => (&long[..p], Some(long[p + 1..].to_vec())),
                    None => (long, None),
                };
                let name = String::from_utf8_lossy(name).into_owned();
                if self.long_flags.contains(&name.as_str()) && value.is_none() {
                    out.push(Opt { name, value: None });
                    i += 1;
                } else if self.long_valued.contains(&name.as_str()) {
                    let (value, next) = match value {
                        Some(v) => (v, i + 1),
                        None => (self.value_at(argv, i + 1, &name)?, i + 2),
                    };
                    out.push(Opt {
                        name,
                        value: Some(value),
                    });
                    i = next;
                } else {
                    return Err(self.unknown(w));
                }
                continue;
            }
            let Some(cluster) = w.strip_prefix(b"-").filter(|c| !c.is_empty()) else {
                return Ok((out, i));
            };
            i += 1;
            for (k, &c) in cluster.iter().enumerate() {
                let name = char::from(c).to_string();
                if self.flags.contains(&c) {
                    out.push(Opt { name, value: None });
                } else if self.valued.contains(&c) {
                    let rest = &cluster[k + 1..];
                    let value = if rest.is_empty() {
                        i += 1;
                        self.value_at(argv, i - 1, &name)?
                    } else {
                        rest.to_vec()
                    };
                    out.push(Opt {
                        name,
                        value: Some(value),
                    });
                    break;
                } else {
                    return Err(self.unknown(w));
                }
            }
        }
        Ok((out, i))
    }

    fn value_at(&self, argv: &[OsString], i: usize, name: &str) -> Result<Vec<u8>, Refused> {
        argv.get(i)
            .map(|v| v.as_bytes().to_vec())
            .ok_or_else(|| format!("{}: no value after its option {name}", self.name))
    }

    /// An option this grammar does not read, named without its value (a
    /// value could be a secret).
    fn unknown(&self, word: &[u8]) -> Refused {
        let shown = match word.iter().position(|&b| b == b'=') {
            Some(p) if word.starts_with(b"--") => {
                format!("{}=...", String::from_utf8_lossy(&word[..p]))
            }
            _ => String::from_utf8_lossy(word).into_owned(),
        };
        format!(
            "{}: an option keepwrap does not read ('{}')",
            self.name,
            shown.escape_debug()
        )
    }
}

const NUMACTL: Grammar = Grammar {
    name: "numactl",
    flags: b"abl",
    valued: b"iwpPNCm",
    long_flags: &["all", "balancing", "localalloc"],
    long_valued: &[
        "interleave",
        "weighted-interleave",
        "preferred",
        "preferred-many",
        "cpunodebind",
        "cpubind",
        "physcpubind",
        "membind",
    ],
};

const NICE: Grammar = Grammar {
    name: "nice",
    flags: b"",
    valued: b"n",
    long_flags: &[],
    long_valued: &["adjustment"],
};

const TASKSET: Grammar = Grammar {
    name: "taskset",
    flags: b"ac",
    valued: b"",
    long_flags: &["all-tasks", "cpu-list"],
    long_valued: &[],
};

const CHRT: Grammar = Grammar {
    name: "chrt",
    flags: b"bdfioreRva",
    valued: b"TPD",
    long_flags: &[
        "batch",
        "deadline",
        "fifo",
        "idle",
        "other",
        "rr",
        "ext",
        "reset-on-fork",
        "verbose",
        "all-tasks",
    ],
    long_valued: &["sched-runtime", "sched-period", "sched-deadline"],
};

const IONICE: Grammar = Grammar {
    name: "ionice",
    flags: b"t",
    valued: b"cn",
    long_flags: &["ignore"],
    long_valued: &["class", "classdata"],
};

const STDBUF: Grammar = Grammar {
    name: "stdbuf",
    flags: b"",
    valued: b"ioe",
    long_flags: &[],
    long_valued: &["input", "output", "error"],
};

const TIMEOUT: Grammar = Grammar {
    name: "timeout",
    flags: b"v",
    valued: b"ks",
    long_flags: &["preserve-status", "foreground", "verbose"],
    long_valued: &["kill-after", "signal"],
};

const SETPRIV: Grammar = Grammar {
    name: "setpriv",
    flags: b"",
    valued: b"",
    long_flags: &["no-new-privs", "clear-groups", "keep-groups", "init-groups"],
    long_valued: &[
        "inh-caps",
        "ambient-caps",
        "bounding-set",
        "ruid",
        "euid",
        "rgid",
        "egid",
        "reuid",
        "regid",
        "groups",
        "securebits",
        "pdeathsig",
        "selinux-label",
        "apparmor-profile",
        "landlock-access",
        "landlock-rule",
    ],
};

const ENV: Grammar = Grammar {
    name: "env",
    flags: b"iv",
    valued: b"uC",
    long_flags: &["ignore-environment", "debug"],
    long_valued: &["unset", "chdir"],
};

/// A word in a reason: as written, unless its name says it holds a secret.
fn shown(w: &[u8]) -> String {
    let text = String::from_utf8_lossy(w);
    if super::is_secret_name(&text) {
        "<redacted>".into()
    } else {
        text.escape_debug().to_string()
    }
}

/// The base name of a program.
fn base(argv0: &[u8]) -> &[u8] {
    argv0.rsplit(|&b| b == b'/').next().unwrap_or(argv0)
}

/// Whether `argv[0]` is a prefix this module reads.
pub fn is_prefix(argv0: &[u8]) -> bool {
    matches!(
        base(argv0),
        b"numactl"
            | b"nice"
            | b"taskset"
            | b"chrt"
            | b"ionice"
            | b"stdbuf"
            | b"timeout"
            | b"setpriv"
            | b"env"
            | b"nvidia_entrypoint.sh"
    )
}

/// Read the prefix `argv` starts with: `None` when `argv[0]` is none
/// ([`is_prefix`]), `Some(Err)` when it is one whose options or command
/// cannot be read.
pub fn read(argv: &[OsString]) -> Option<Result<Prefix, Refused>> {
    let argv0 = argv.first()?.as_bytes();
    let r = match base(argv0) {
        b"numactl" => plain(&NUMACTL, argv, 1, 0),
        b"nice" => nice(argv),
        b"taskset" => positional(&TASKSET, argv, "a CPU mask or list", |w| {
            !w.is_empty()
                && w.iter()
                    .all(|b| b.is_ascii_hexdigit() || b",-:xX".contains(b))
        }),
        b"chrt" => positional(&CHRT, argv, "a priority", |w| {
            !w.is_empty() && w.iter().all(u8::is_ascii_digit)
        }),
        b"ionice" => plain(&IONICE, argv, 1, 0),
        b"stdbuf" => plain(&STDBUF, argv, 1, 0),
        b"timeout" => timeout(argv),
        b"setpriv" => plain(&SETPRIV, argv, 1, 0),
        b"env" => env(argv),
        b"nvidia_entrypoint.sh" => command_at("nvidia_entrypoint.sh", argv, 1),
        _ => return None,
    };
    Some(r)
}

/// A prefix whose command follows its options (after `skip` positional
/// words).
fn plain(g: &Grammar, argv: &[OsString], start: usize, skip: usize) -> Result<Prefix, Refused> {
    let (_, at) = g.read(argv, start)?;
    command_at(g.name, argv, at + skip)
}

fn command_at(name: &'static str, argv: &[OsString], at: usize) -> Result<Prefix, Refused> {
    if argv.get(at).is_none() {
        return Err(format!("{name}: no command to run"));
    }
    Ok(Prefix {
        name,
        command_at: at,
        ..Prefix::default()
    })
}

/// `nice [-N] [-n N] COMMAND` (the old `-N` form first, as coreutils reads it).
fn nice(argv: &[OsString]) -> Result<Prefix, Refused> {
    let mut i = 1;
    while argv.get(i).is_some_and(|w| {
        w.as_bytes()
            .strip_prefix(b"-")
            .is_some_and(|d| !d.is_empty() && d.iter().all(u8::is_ascii_digit))
    }) {
        i += 1;
    }
    plain(&NICE, argv, i, 0)
}

/// `PROG [OPTIONS] WORD COMMAND` (taskset's mask, chrt's priority):
/// `-p` (act on a running process) is no launch.
fn positional(
    g: &Grammar,
    argv: &[OsString],
    what: &str,
    ok: fn(&[u8]) -> bool,
) -> Result<Prefix, Refused> {
    let (_, at) = g.read(argv, 1)?;
    match argv.get(at).map(|w| w.as_bytes()) {
        Some(w) if ok(w) => command_at(g.name, argv, at + 1),
        Some(w) => Err(format!("{}: '{}' where {what} belongs", g.name, shown(w))),
        None => Err(format!("{}: no command to run", g.name)),
    }
}

/// `timeout [OPTIONS] DURATION COMMAND`. Its exit status is the engine's
/// unless it stopped the engine (124, or 128+9 for KILL): 0 still proves
/// the engine ended well, except with `--preserve-status`, where an engine
/// it stopped that exits 0 on TERM makes it exit 0 too.
fn timeout(argv: &[OsString]) -> Result<Prefix, Refused> {
    let (opts, at) = TIMEOUT.read(argv, 1)?;
    let duration = |w: &[u8]| {
        let num = w.strip_suffix(b"s").or(w.strip_suffix(b"m"));
        let num = num.or(w.strip_suffix(b"h")).or(w.strip_suffix(b"d"));
        let num = num.unwrap_or(w);
        !num.is_empty() && num.iter().all(|b| b.is_ascii_digit() || *b == b'.')
    };
    match argv.get(at).map(|w| w.as_bytes()) {
        Some(w) if duration(w) => {}
        Some(w) => return Err(format!("timeout: '{}' where a duration belongs", shown(w))),
        None => return Err("timeout: no command to run".into()),
    }
    let mut p = command_at("timeout", argv, at + 1)?;
    if opts.iter().any(|o| o.name == "preserve-status") {
        p.exit_unproven =
            Some("timeout --preserve-status exits 0 when an engine it stopped exits 0");
    }
    Ok(p)
}

/// `env [-i] [-u NAME] [-C DIR] [-] [NAME=value]... COMMAND`: coreutils
/// clears the environment, unsets, sets each assignment, changes
/// directory, then execs.
fn env(argv: &[OsString]) -> Result<Prefix, Refused> {
    let (opts, mut i) = ENV.read(argv, 1)?;
    let mut p = Prefix {
        name: "env",
        ..Prefix::default()
    };
    for o in opts {
        match (o.name.as_str(), o.value) {
            ("i" | "ignore-environment", _) => p.clear_env = true,
            ("u" | "unset", Some(v)) => {
                if v.is_empty() || v.contains(&b'=') {
                    return Err("env: -u with a name that is none".into());
                }
                p.unset.push(OsString::from_vec(v));
            }
            ("C" | "chdir", Some(v)) => p.chdir = Some(OsString::from_vec(v)),
            _ => {} // --debug
        }
    }
    if argv.get(i).is_some_and(|w| w.as_bytes() == b"-") {
        p.clear_env = true;
        i += 1;
    }
    while let Some(w) = argv.get(i).map(|w| w.as_bytes()) {
        let Some(eq) = w.iter().position(|&b| b == b'=') else {
            break;
        };
        if eq == 0 {
            return Err("env: an assignment without a name".into());
        }
        p.assigns.push((
            OsString::from_vec(w[..eq].to_vec()),
            OsString::from_vec(w[eq + 1..].to_vec()),
        ));
        i += 1;
    }
    if argv.get(i).is_none() {
        return Err("env: no command to run".into());
    }
    p.command_at = i;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    fn at(s: &str) -> usize {
        match read(&v(s)) {
            Some(Ok(p)) => p.command_at,
            other => panic!("{s}: {other:?}"),
        }
    }

    fn refused(s: &str) -> String {
        match read(&v(s)) {
            Some(Err(why)) => why,
            other => panic!("{s} should be refused: {other:?}"),
        }
    }

    #[test]
    fn reads_each_prefix_with_its_grammar() {
        for (s, n) in [
            ("numactl --cpunodebind=0 python3", 2),
            ("numactl -N 0 --membind 0 python3", 5),
            ("numactl -N0 -m0 python3", 3),
            ("numactl --physcpubind=0-7 -l python3", 3),
            ("numactl -i all python3", 3),
            ("numactl --interleave all --localalloc python3", 4),
            ("numactl -lN 1 python3", 3),
            ("/usr/bin/numactl -- python3", 2),
            ("nice python3", 1),
            ("nice -n 5 python3", 3),
            ("nice -n5 python3", 2),
            ("nice -10 python3", 2),
            ("nice --adjustment=5 python3", 2),
            ("taskset -c 0-3 python3", 3),
            ("taskset 0xff python3", 2),
            ("taskset --cpu-list 0,2,4 python3", 3),
            ("chrt -f 10 python3", 3),
            ("chrt --rr 10 python3", 3),
            ("chrt -o 0 python3", 3),
            ("ionice -c2 -n0 python3", 3),
            ("ionice -c 3 -t python3", 4),
            ("ionice --class=idle python3", 2),
            ("stdbuf -oL -eL python3", 3),
            ("stdbuf --output=L -e 0 python3", 4),
            ("timeout 1h python3", 2),
            ("timeout -k 10 -s TERM 3600 python3", 6),
            ("timeout --foreground 0.5 python3", 3),
            (
                "setpriv --no-new-privs --reuid=1000 --init-groups python3",
                4,
            ),
            ("setpriv --pdeathsig TERM -- python3", 4),
            ("env A=1 python3", 2),
            ("env -i A=1 python3", 3),
            ("env -u X -C /w python3", 5),
            ("env --unset=X -- A=1 python3", 4),
            ("env - A=1 python3", 3),
            ("/opt/nvidia/nvidia_entrypoint.sh python3", 1),
        ] {
            assert_eq!(at(s), n, "{s}");
        }
        assert!(read(&v("python3 x")).is_none());
        assert!(read(&v("nvidia-smi")).is_none());
    }

    #[test]
    fn refuses_what_it_does_not_read() {
        for s in [
            "numactl --cpunode=0 python3", // an abbreviation
            "numactl --show",
            "numactl -H",
            "numactl --hardware python3",
            "numactl -N",
            "numactl --cpunodebind=0",
            "nice --5 python3",
            "nice -x python3",
            "taskset -p 0xff 1234",
            "taskset python3",
            "chrt -p 10 1",
            "chrt -f python3", // a priority that is no number: versions differ
            "chrt -m",
            "ionice -p 1",
            "stdbuf -x python3",
            "timeout python3",
            "timeout -x 10 python3",
            "timeout 10",
            "setpriv --reset-env python3",
            "setpriv -d",
            "env -S 'a b' python3",
            "env -0 python3",
            "env --ignore-signal=TERM python3",
            "env =x python3",
            "env A=1",
            "env -u",
            "/opt/nvidia/nvidia_entrypoint.sh",
        ] {
            let why = refused(s);
            let name = s
                .split_whitespace()
                .next()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap();
            assert!(why.starts_with(&format!("{name}: ")), "{s}: {why}");
        }
    }

    #[test]
    fn a_reason_never_shows_an_options_value() {
        let why = refused("numactl --api-key=sk-123 python3");
        assert!(
            !why.contains("sk-123") && why.contains("'--api-key=...'"),
            "{why}"
        );
        let why = refused("chrt -f --token=abc python3");
        assert!(!why.contains("abc"), "{why}");
        let why = refused("timeout SECRET_TOKEN=x python3");
        assert!(!why.contains("SECRET_TOKEN=x"), "{why}");
    }

    #[test]
    fn env_reads_what_it_changes() {
        let Some(Ok(p)) = read(&v("env -i -u X --chdir=/w A=1 B=x=y python3")) else {
            panic!()
        };
        assert!(p.clear_env);
        assert_eq!(p.unset, [OsString::from("X")]);
        assert_eq!(p.chdir, Some(OsString::from("/w")));
        assert_eq!(
            p.assigns,
            [
                (OsString::from("A"), OsString::from("1")),
                (OsString::from("B"), OsString::from("x=y"))
            ]
        );
        // any word with `=` is an assignment to env, as coreutils reads it
        assert_eq!(at("env a-b=1 python3"), 2);
    }

    #[test]
    fn timeout_preserve_status_proves_no_exit() {
        let Some(Ok(p)) = read(&v("timeout --preserve-status 10 python3")) else {
            panic!()
        };
        assert!(p.exit_unproven.is_some());
        let Some(Ok(p)) = read(&v("timeout -s KILL 10 python3")) else {
            panic!()
        };
        assert!(p.exit_unproven.is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn no_input_panics(words in proptest::collection::vec("[-a-zA-Z0-9=/ ]{0,8}", 0..6)) {
            for p in ["numactl", "nice", "taskset", "chrt", "ionice", "stdbuf", "timeout", "setpriv", "env"] {
                let argv: Vec<OsString> = std::iter::once(p.to_string()).chain(words.iter().cloned()).map(OsString::from).collect();
                if let Some(Ok(p)) = read(&argv) {
                    assert!(p.command_at < argv.len());
                }
            }
        }
    }
}
