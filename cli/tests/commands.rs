//! Every `distlock` command, run as the built binary against a throwaway
//! redis-server of its own, with locks taken by a `LockClient` in the test.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use distlock_testkit::RedisServer;
use serde_json::Value;
use support::{
    client, code, json, json_lines, named, run, run_bare, run_with_input, stderr, stdout, Running,
};

fn server() -> RedisServer {
    RedisServer::start().expect("a throwaway redis-server starts")
}

fn names_of(lines: &[Value]) -> BTreeSet<String> {
    lines
        .iter()
        .map(|line| line["name"].as_str().expect("a name").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_both_readers_of_a_read_lock() {
    let server = server();
    let url = server.url();
    let locks = client(&url).await;
    // Two acquires outside any lock scope: two holders.
    let first = locks.read_lock("catalogue").await.expect("a read hold");
    let second = locks
        .read_lock("catalogue")
        .await
        .expect("another read hold");
    named(&locks, &["catalogue"]).await;

    let human = run(&url, &["inspect", "catalogue"]).await;
    assert_eq!(code(&human), Some(0), "held: exit 0; {}", stderr(&human));
    let text = stdout(&human);
    assert!(text.contains("kind                read-write"), "{text}");
    assert!(text.contains("held                yes"), "{text}");
    assert!(text.contains("hold count          2"), "{text}");
    assert!(text.contains("holders             2"), "{text}");
    assert!(
        text.contains("MODE  HOLDS  LEASE LEFT  TOKEN  HELD BY"),
        "{text}"
    );
    let pid = std::process::id();
    let held_by = text
        .lines()
        .find(|line| line.starts_with("held by "))
        .unwrap_or_default();
    assert!(
        held_by.contains(&format!(", pid {pid}, in cli/tests/commands.rs:")),
        "the holder, this test's process: {text}"
    );
    let reader_rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|line| line.starts_with("read "))
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(reader_rows.len(), 2, "one row per reader:\n{text}");
    for row in reader_rows {
        // Mode, hold count, a lease that reads like `29.9s`, no token, then who:
        // `<service> on <host>, pid <pid>, in <site>, for 0.0s`.
        assert!(
            matches!(row.as_slice(), ["read", "1", lease, "-", _service, "on", _host, "pid", who_pid, "in", site, "for", _]
                if lease.ends_with('s') && lease.starts_with(['2', '3'])
                    && *who_pid == format!("{pid},")
                    && site.starts_with("cli/tests/commands.rs:")),
            "{row:?}"
        );
    }

    let machine = run(&url, &["--json", "inspect", "catalogue"]).await;
    assert_eq!(code(&machine), Some(0));
    let info = json(&machine);
    assert_eq!(info["name"], "catalogue");
    assert_eq!(info["held"], true);
    assert_eq!(info["kind"], "read_write");
    assert_eq!(info["hold_count"], 2);
    assert_eq!(info["waiting"], 0);
    assert_eq!(info["fencing_token"], Value::Null);
    let holders = info["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 2);
    for holder in holders {
        let who = &holder["holder"];
        assert_eq!(who["pid"], pid, "{who}");
        assert!(who["site"]
            .as_str()
            .is_some_and(|site| site.starts_with("cli/tests/commands.rs:")));
        assert!(who["acquired_at"]
            .as_str()
            .is_some_and(|at| at.ends_with('Z')));
        assert!(who["held_for_ms"].as_u64().is_some(), "{who}");
    }
    for holder in holders {
        assert_eq!(holder["mode"], "read");
        assert_eq!(holder["hold_count"], 1);
        let lease = holder["lease_remaining_ms"].as_u64().expect("a lease");
        assert!(
            lease > 20_000 && lease <= 30_000,
            "the 30 s watchdog lease: {lease}"
        );
        assert_eq!(holder["fencing_token"], Value::Null);
    }
    first.unlock().await.expect("released");
    second.unlock().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_a_plain_lock_and_its_fencing_token() {
    let server = server();
    let url = server.url();
    let locks = client(&url).await;
    let guard = locks
        .lock("ledger:7")
        .fencing(true)
        .await
        .expect("the lock");
    let token = guard.fencing_token().expect("a fencing token");

    let machine = run(&url, &["--json", "inspect", "ledger:7"]).await;
    assert_eq!(code(&machine), Some(0), "{}", stderr(&machine));
    let info = json(&machine);
    assert_eq!(info["kind"], "exclusive");
    assert_eq!(info["held"], true);
    assert_eq!(info["hold_count"], 1);
    assert_eq!(info["fencing_token"], token);
    assert_eq!(info["last_fencing_token"], token);
    assert_eq!(info["holders"][0]["mode"], "exclusive");
    assert_eq!(info["holders"][0]["fencing_token"], token);

    let human = run(&url, &["inspect", "ledger:7"]).await;
    let text = stdout(&human);
    assert!(text.contains("kind                exclusive"), "{text}");
    assert!(
        text.contains(&format!("fencing token       {token}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("last fencing token  {token}")),
        "{text}"
    );

    guard.unlock().await.expect("released");
    let free = run(&url, &["--json", "inspect", "ledger:7"]).await;
    assert_eq!(code(&free), Some(1), "a free lock: exit 1");
    let info = json(&free);
    assert_eq!(info["held"], false);
    assert_eq!(info["holders"].as_array().map(Vec::len), Some(0));
    assert_eq!(
        info["last_fencing_token"], token,
        "the counter outlives the hold"
    );

    // A name with a control character cannot drive the operator's terminal.
    let odd = locks.lock("odd\u{1b}[2J").await.expect("the lock");
    let human = run(&url, &["inspect", "odd\u{1b}[2J"]).await;
    assert_eq!(code(&human), Some(0));
    let text = stdout(&human);
    assert!(
        text.contains("odd\\u{1b}[2J") && !text.contains('\u{1b}'),
        "{text:?}"
    );
    let machine = json(&run(&url, &["--json", "inspect", "odd\u{1b}[2J"]).await);
    assert_eq!(
        machine["name"], "odd\u{1b}[2J",
        "JSON keeps the name as it is"
    );
    odd.unlock().await.expect("released");
}

/// Issue 26: a plain lock with waiters showed `waiting 0`. Its waiters keep no
/// place in Redis, but each client that has any listens on the lock's channel:
/// `listening` counts those clients (two here, one with two waiting tasks), and
/// the output says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_counts_the_clients_waiting_for_a_plain_lock() {
    let server = server();
    let url = server.url();
    let holder = client(&url).await;
    let guard = holder.lock("busy:1").await.expect("the lock");
    let idle = json(&run(&url, &["--json", "inspect", "busy:1"]).await);
    assert_eq!(idle["listening"], 0, "nobody waits yet: {idle}");

    let first = client(&url).await;
    let second = client(&url).await;
    let wait = |locks: distlock::LockClient| {
        tokio::spawn(async move {
            let guard = locks
                .lock("busy:1")
                .wait(Duration::from_secs(20))
                .await
                .expect("the lock, once free");
            guard.unlock().await.expect("released");
        })
    };
    let waiters = [
        wait(first.clone()),
        wait(first.clone()),
        wait(second.clone()),
    ];
    let deadline = Instant::now() + Duration::from_secs(5);
    let info = loop {
        let info = json(&run(&url, &["--json", "inspect", "busy:1"]).await);
        if info["listening"] == 2 || Instant::now() > deadline {
            break info;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(info["listening"], 2, "two clients wait: {info}");
    assert_eq!(
        info["waiting"], 0,
        "a plain lock's waiters keep no place: {info}"
    );

    let text = stdout(&run(&url, &["inspect", "busy:1"]).await);
    assert!(
        text.contains("listening           2 clients subscribed to its release (one per client with tasks waiting for it, however many"),
        "{text}"
    );
    assert!(
        text.contains(
            "waiting             - (this kind's waiters keep no place in Redis: see listening)"
        ),
        "{text}"
    );

    guard.unlock().await.expect("released");
    for waiter in waiters {
        waiter.await.expect("a waiter ends");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_finds_the_locks_that_match_a_pattern() {
    let server = server();
    let url = server.url();
    let locks = client(&url).await;
    let one = locks.lock("order:1").fencing(true).await.expect("order:1");
    let braces = locks.lock("order:{7}").await.expect("order:{7}");
    let reading = locks.read_lock("order:rw").await.expect("order:rw");
    let permit = locks
        .semaphore("order:exports", 3)
        .acquire()
        .await
        .expect("a permit");
    let other = locks.lock("invoice:1").await.expect("invoice:1");
    // Released: its key is gone, and its fencing counter stays (`:fence`), a free
    // lock that `--all` lists.
    locks
        .lock("order:done")
        .fencing(true)
        .await
        .expect("order:done")
        .unlock()
        .await
        .expect("released");
    named(
        &locks,
        &[
            "order:1",
            "order:{7}",
            "order:rw",
            "order:exports",
            "invoice:1",
        ],
    )
    .await;
    // A key of the namespace that is no lock's, and another namespace's lock.
    server
        .cmd(&["SET", "distlock:unrelated", "x"])
        .expect("a foreign key");
    let key = |namespace: &str, name: &str| {
        String::from_utf8_lossy(&distlock::layout::lock_key(namespace, name.as_bytes()))
            .into_owned()
    };
    server
        .cmd(&["SET", &key("billing", "order:9"), "x"])
        .expect("another namespace's key");
    // A key at a lock's place that distlock did not write: skipped, with a word.
    server
        .cmd(&["SET", &key("distlock", "order:foreign"), "x"])
        .expect("a foreign key at a lock's place");

    let machine = run(&url, &["--json", "list", "order:*"]).await;
    assert_eq!(code(&machine), Some(0), "{}", stderr(&machine));
    let lines = json_lines(&machine);
    let expected: BTreeSet<String> = ["order:1", "order:exports", "order:rw", "order:{7}"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(names_of(&lines), expected, "held locks only, each once");
    let skipped = stderr(&machine);
    assert!(skipped.contains("skipped `order:foreign`"), "{skipped}");
    for line in &lines {
        match line["name"].as_str() {
            Some("order:rw") => assert_eq!(line["kind"], "read_write"),
            Some("order:exports") => {
                assert_eq!(line["kind"], "semaphore");
                assert_eq!(line["permits"], 3);
            }
            Some("order:1") => assert!(line["fencing_token"].as_u64().is_some()),
            _ => assert_eq!(line["kind"], "exclusive"),
        }
        assert_eq!(line["held"], true);
        assert_eq!(line["holders"].as_array().map(Vec::len), Some(1));
    }

    let all = run(&url, &["--json", "list", "order:*", "--all"]).await;
    let with_free = names_of(&json_lines(&all));
    assert!(
        with_free.contains("order:done"),
        "--all shows the free lock: {with_free:?}"
    );
    assert_eq!(with_free.len(), 5);

    let human = run(&url, &["list", "--count", "2"]).await;
    assert_eq!(code(&human), Some(0));
    let text = stdout(&human);
    let rows: Vec<&str> = text.lines().collect();
    let header: Vec<&str> = rows
        .first()
        .map(|row| row.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(
        header,
        [
            "NAME",
            "KIND",
            "HOLDER",
            "HOLDERS",
            "HOLDS",
            "LEASE",
            "LEFT",
            "WAITING",
            "LISTENING"
        ],
        "{text}"
    );
    assert_eq!(rows.len(), 6, "a header and five held locks:\n{text}");
    let this_process = format!(":{}", std::process::id());
    assert!(
        rows[1..].iter().all(|row| row.contains(&this_process)),
        "each held lock shows its holder, `<service>@<host>:<pid>`:\n{text}"
    );
    assert!(text.contains("invoice:1"), "{text}");
    assert!(text.contains("semaphore(3)"), "{text}");
    assert!(
        !text.contains("order:done") && !text.contains("unrelated"),
        "{text}"
    );

    let none = run(&url, &["list", "nothing:*"]).await;
    assert_eq!(code(&none), Some(1), "nothing matched: exit 1");
    assert!(
        stderr(&none).contains("no held lock matches"),
        "{}",
        stderr(&none)
    );

    for guard in [one, braces, reading, permit, other] {
        guard.unlock().await.expect("released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_with_yes_deletes_the_lock_and_wakes_its_waiter() {
    let server = server();
    let url = server.url();
    let holder = client(&url).await.lock("job:9").await.expect("held");
    let waiter_client = client(&url).await;
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = waiter_client
            .lock("job:9")
            .wait(Duration::from_secs(25))
            .await;
        (guard.map(|guard| guard.hold_count()), started.elapsed())
    });
    // The waiter is in its wait before the lock is broken.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "the waiter waits");

    let started = Instant::now();
    let output = run(
        &url,
        &[
            "force-unlock",
            "job:9",
            "--reason",
            "holder pod gone",
            "--yes",
        ],
    )
    .await;
    assert_eq!(
        code(&output),
        Some(0),
        "deleted: exit 0; {}",
        stderr(&output)
    );
    assert!(
        stdout(&output).contains("deleted `job:9`"),
        "{}",
        stdout(&output)
    );
    let log = stderr(&output);
    assert!(
        log.contains("\"holder pod gone\""),
        "the reason is logged: {log}"
    );
    assert!(log.contains("ops-tester@"), "who ran it is logged: {log}");

    let (granted, _) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is woken well before its wait ends")
        .expect("the waiter task ends");
    assert_eq!(granted.expect("the waiter gets the lock"), 1);
    // Woken by the release message, not by the end of the holder's 30 s lease.
    assert!(started.elapsed() < Duration::from_secs(10));
    tokio::time::timeout(Duration::from_secs(20), holder.lost())
        .await
        .expect("the holder learns it lost the lock at its next renewal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_answered_no_changes_nothing() {
    let server = server();
    let url = server.url();
    let locks = client(&url).await;
    let guard = locks.lock("job:10").fencing(true).await.expect("held");

    let output = run_with_input(
        &url,
        &["force-unlock", "job:10", "--reason", "testing"],
        "n\n",
    )
    .await;
    assert_eq!(
        code(&output),
        Some(1),
        "declined: exit 1; {}",
        stderr(&output)
    );
    let prompt = stderr(&output);
    assert!(prompt.contains("Force-unlock `job:10`"), "{prompt}");
    assert!(prompt.contains("[y/N]"), "{prompt}");
    assert!(prompt.contains("declined"), "{prompt}");

    let info = locks.inspect("job:10").await.expect("inspect");
    assert!(info.held, "still held");
    assert_eq!(info.fencing_token, guard.fencing_token());
    assert!(!guard.is_lost());
    guard
        .unlock()
        .await
        .expect("the holder releases its lock as usual");

    // A free lock is not worth a question: exit 1 at once.
    let free = run(&url, &["force-unlock", "job:10", "--reason", "testing"]).await;
    assert_eq!(code(&free), Some(1));
    assert!(!stderr(&free).contains("[y/N]"), "{}", stderr(&free));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_each_release_with_the_state_after_it() {
    let server = server();
    let url = server.url();
    let locks = client(&url).await;
    let guard = locks.lock("report:daily").await.expect("held");

    let mut watch = Running::start(&["--url", &url, "--json", "watch", "report:daily"]);
    let first: Value =
        serde_json::from_str(&watch.next_line(Duration::from_secs(10)).await).expect("JSON");
    assert_eq!(first["event"], "watching", "{first}");
    assert_eq!(first["state"]["held"], true);

    guard.unlock().await.expect("released");
    let line = watch.next_line(Duration::from_secs(10)).await;
    let released: Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(released["event"], "release", "{released}");
    assert_eq!(released["name"], "report:daily");
    assert_eq!(released["state"]["held"], false);
    let time = released["time"].as_str().expect("a timestamp");
    assert!(
        time.ends_with('Z') && time.len() == 24,
        "RFC 3339 UTC: {time}"
    );
    // Only these fields: the message itself (with the owner's id) is never shown.
    let fields: BTreeSet<&str> = released
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields, BTreeSet::from(["event", "name", "state", "time"]));

    let again = locks.lock("report:daily").await.expect("held again");
    locks
        .force_unlock("report:daily")
        .await
        .expect("force-unlocked");
    let broken: Value =
        serde_json::from_str(&watch.next_line(Duration::from_secs(10)).await).expect("JSON");
    assert_eq!(broken["event"], "force_unlock", "{broken}");
    drop(again);

    assert_eq!(
        watch.interrupt().await,
        Some(0),
        "Ctrl-C ends watch with exit 0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_human_lines_with_a_timestamp() {
    let server = server();
    let url = server.url();
    let locks = client(&url).await;
    let mut watch = Running::start(&["--url", &url, "watch", "report:weekly"]);
    let first = watch.next_line(Duration::from_secs(10)).await;
    assert!(
        first.contains("watching") && first.contains("report:weekly: free"),
        "{first}"
    );

    let guard = locks.lock("report:weekly").await.expect("held");
    guard.unlock().await.expect("released");
    let line = watch.next_line(Duration::from_secs(10)).await;
    assert!(
        line.contains("  release  ") && line.ends_with("report:weekly: free"),
        "{line}"
    );
    assert_eq!(
        line.find('T'),
        Some(10),
        "starts with an RFC 3339 time: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_reports_the_server_and_the_scripts() {
    let server = server();
    let url = server.url();
    let human = run(&url, &["ping"]).await;
    assert_eq!(code(&human), Some(0), "{}", stderr(&human));
    let text = stdout(&human);
    assert!(
        text.contains(&format!("servers           127.0.0.1:{}", server.port())),
        "{text}"
    );
    assert!(text.contains("version           redis "), "{text}");
    assert!(text.contains("(PING)"), "{text}");
    assert!(text.contains("maxmemory-policy  "), "{text}");
    assert!(text.contains("scripts           loaded"), "{text}");
    // Issue 37 (5): the scripts run by the library, and nothing is said of a
    // script cache that is not used.
    assert!(
        text.contains("scripts run by    FCALL: distlock's function library is loaded"),
        "{text}"
    );
    assert!(
        !text.contains("cached"),
        "the unused script cache is named: {text}"
    );
    assert!(text.contains("health            ok"), "{text}");

    let machine = run(&url, &["--json", "ping"]).await;
    assert_eq!(code(&machine), Some(0));
    let report = json(&machine);
    assert_eq!(report["scripts"]["loaded"], true);
    assert_eq!(report["namespace"], "distlock");
    let node = &report["nodes"][0];
    let version = node["version"].as_str().expect("a version");
    assert!(
        version.starts_with(|c: char| c.is_ascii_digit()),
        "{version}"
    );
    assert!(node["round_trip_us"].as_u64().is_some());
    assert!(node["maxmemory_policy"].as_str().is_some(), "{node}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_says_when_the_user_may_not_load_the_scripts() {
    let server = server();
    server
        .cmd(&[
            "ACL",
            "SETUSER",
            "reader",
            "on",
            ">readerpw",
            "~*",
            "&*",
            "+@all",
            "-script",
            "-function",
            "-fcall",
            "-config",
        ])
        .expect("a user without SCRIPT, FUNCTION, FCALL and CONFIG");
    let url = format!("redis://reader:readerpw@127.0.0.1:{}/", server.port());
    let output = run(&url, &["--json", "ping"]).await;
    assert_eq!(
        code(&output),
        Some(4),
        "scripts refused: exit 4; {}",
        stderr(&output)
    );
    let report = json(&output);
    assert_eq!(report["scripts"]["loaded"], false);
    let error = report["scripts"]["error"].as_str().expect("why");
    assert!(error.contains("permission"), "{error}");
    assert!(
        report["nodes"][0]["maxmemory_policy_error"]
            .as_str()
            .is_some(),
        "CONFIG GET refused is tolerated"
    );
    let missing = &report["nodes"][0]["missing_permissions"];
    assert!(
        missing
            .as_array()
            .is_some_and(|rules| rules.iter().any(|rule| rule == "script|load")),
        "the check names what is missing: {missing}"
    );
    assert!(!stdout(&output).contains("readerpw"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_exits_3_without_showing_the_password() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.local_addr().expect("its address").port()
    };
    let url = format!("redis://:hunter2@127.0.0.1:{port}/");
    for args in [&["ping"][..], &["inspect", "a"], &["list"], &["watch", "a"]] {
        let output = run(&url, args).await;
        assert_eq!(code(&output), Some(3), "{args:?}: {}", stderr(&output));
        let message = stderr(&output);
        assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_usage_exits_2() {
    let cases: [&[&str]; 10] = [
        &[],
        &["frobnicate"],
        &["inspect"],
        &["inspect", "a", "--bogus"],
        &["force-unlock", "a", "--yes"],
        &["--url", "not a url", "inspect", "a"],
        &["--namespace", "a{b}", "inspect", "a"],
        &["--namespace", "a{b}", "web", "--bind", "127.0.0.1:0"],
        &[
            "--url",
            "redis://127.0.0.1:1",
            "--cluster",
            "redis://127.0.0.1:2",
            "list",
        ],
        &["--sentinel", "redis://127.0.0.1:1", "ping"],
    ];
    for args in cases {
        let output = run_bare(args).await;
        assert_eq!(code(&output), Some(2), "{args:?}: {}", stderr(&output));
        assert!(!stderr(&output).is_empty(), "{args:?} says what is wrong");
    }
    let help = run_bare(&["--help"]).await;
    assert_eq!(code(&help), Some(0));
    let text = stdout(&help);
    for line in [
        "0  done",
        "1  not held",
        "2  bad usage",
        "3  cannot reach",
        "4  any other",
    ] {
        assert!(
            text.contains(line),
            "--help documents exit code `{line}`:\n{text}"
        );
    }
}
