//! `distlock web` in a real headless browser: Debian's `chromium`, driven with its
//! own `--headless --dump-dom` (the page's DOM once its script has rendered a
//! read) and `--screenshot`, against throwaway redis-servers.
//!
//! The browser is `$CHROMIUM`, else `chromium` on PATH (`cargo xtask test`
//! installs it with apt-get when it runs as root). Without it the tests fail,
//! except when not root, where they skip with a message saying how to get it.
//!
//! The screenshot of the first test is kept in the target directory
//! (`target/tmp/web.png`); with `DISTLOCK_UPDATE_SCREENSHOT=1` it also replaces
//! README's picture, `docs/web.png`.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use distlock::LockClient;
use distlock_testkit::RedisServer;
use support::Running;

/// The browser, or `None` (with the reason printed) when the test may skip.
fn chromium() -> Option<PathBuf> {
    let named = std::env::var_os("CHROMIUM").filter(|path| !path.is_empty());
    let found = named.map(PathBuf::from).or_else(|| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("chromium"))
                .find(|path| path.is_file())
        })
    });
    if found.is_some() {
        return found;
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false);
    assert!(
        !root,
        "chromium is missing: `cargo xtask test` installs it as root (apt-get install chromium), \
         or set CHROMIUM to a Chromium binary"
    );
    eprintln!(
        "SKIPPED: chromium is not installed and this is not root; install Debian's `chromium` \
         (or set CHROMIUM) to run the browser tests"
    );
    None
}

/// A headless Chromium run on `url`, with `extra` flags; its stdout.
fn browse(browser: &PathBuf, url: &str, extra: &[&str]) -> String {
    let profile = tempdir();
    let mut command = Command::new(browser);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,900",
            // Virtual time runs the page's script and its requests to an end (the
            // `#still` view opens no event stream, which would keep it waiting).
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let output = tokio::task::block_in_place(|| command.output()).expect("chromium runs");
    let _ = std::fs::remove_dir_all(&profile);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The page's DOM, once rendered.
fn dom(browser: &PathBuf, url: &str) -> String {
    browse(browser, url, &["--dump-dom"])
}

/// A fresh directory for a browser profile.
fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "distlock-web-{}-{}",
        std::process::id(),
        uuid_like()
    ));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    dir
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or(0)
}

/// Loads the page until `check` holds on its DOM, up to `limit`; the last DOM.
///
/// # Cancel safety
///
/// Dropping it between two loads leaves nothing running; during a load, the
/// browser runs to its end (it blocks the thread).
async fn dom_until(
    browser: &PathBuf,
    url: &str,
    limit: Duration,
    check: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let page = dom(browser, url);
        if check(&page) || Instant::now() >= deadline {
            return page;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `distlock web` on `url` with `args`, and the page's address.
///
/// # Cancel safety
///
/// As [`serve_saying`].
async fn serve(url: &str, args: &[&str]) -> (Running, String) {
    let (web, address, _) = serve_saying(url, args).await;
    (web, address)
}

/// `distlock web` on `url` with `args`, the page's address, and the line that
/// gave it.
///
/// # Cancel safety
///
/// Dropping it kills the command it started.
async fn serve_saying(url: &str, args: &[&str]) -> (Running, String, String) {
    let mut all = vec!["--url", url, "web", "--bind", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let mut web = Running::start(&all);
    let line = web.next_line(Duration::from_secs(20)).await;
    let address = line
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("the address in {line:?}"))
        .to_owned();
    (web, address, line)
}

/// The body of a GET of `path` (e.g. `/api/state`) from `address`.
fn get(address: &str, path: &str) -> String {
    let host = address.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(host).expect("the page's server answers");
    let request = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .expect("the request is sent");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// A POST of `body` (JSON) to `path` of `address`, with the admin token when
/// given: the status code and the body.
fn post(address: &str, path: &str, body: &str, token: Option<&str>) -> (u16, String) {
    let host = address.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(host).expect("the page's server answers");
    let token = token
        .map(|token| format!("x-distlock-admin-token: {token}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n{token}\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .expect("the request is sent");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}

/// A client of `service`, whose watchdog lease is 3 s (renewed every second, so
/// that a holder learns of a force-unlock within about a second).
///
/// # Cancel safety
///
/// Dropping it drops the client being connected.
async fn client(url: &str, service: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .service(service)
        .default_lease(Duration::from_secs(3))
        .response_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("the test's lock client connects")
}

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// The `<tr>` of lock `name` in a DOM, or "".
fn row<'a>(page: &'a str, name: &str) -> &'a str {
    let open = format!("<tr data-name=\"{name}\">");
    page.find(&open)
        .and_then(|at| page[at..].find("</tr>").map(|end| &page[at..at + end]))
        .unwrap_or("")
}

/// The timeline lane of lock `name` in a DOM, or "".
fn lane<'a>(page: &'a str, name: &str) -> &'a str {
    let open = format!("<g class=\"lane\" data-name=\"{name}\">");
    page.find(&open)
        .and_then(|at| page[at..].find("</g>").map(|end| &page[at..at + end]))
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_holders_and_waiters_and_force_unlock_needs_the_token() {
    let Some(browser) = chromium() else { return };
    let server = RedisServer::start().expect("a redis-server");
    let url = server.url();
    let orders = client(&url, "orders-api").await;
    let billing = client(&url, "billing").await;
    let held = orders
        .lock("order:1")
        .function("orders::place_order")
        .await
        .expect("order:1 is held");
    let queue_head = orders
        .fair_lock("stock:7")
        .function("stock::reserve")
        .await
        .expect("stock:7 is held");
    let waiter = {
        let billing = billing.clone();
        tokio::spawn(async move {
            billing
                .lock("order:1")
                .function("billing::charge")
                .wait(Duration::from_secs(60))
                .await
        })
    };
    let fair_waiter = {
        let billing = billing.clone();
        tokio::spawn(async move {
            billing
                .fair_lock("stock:7")
                .wait(Duration::from_secs(60))
                .await
                .map(drop)
        })
    };

    let started = Instant::now();
    let (web, address) = serve(
        &url,
        &[
            "--admin-token",
            "s3cret",
            "--refresh-ms",
            "300",
            "--timeline-minutes",
            "1",
        ],
    )
    .await;
    let still = format!("{address}#still");
    let page = dom_until(&browser, &still, Duration::from_secs(30), |page| {
        row(page, "order:1").contains("orders::place_order")
            && row(page, "stock:7").contains("title=\"1 keeping a place")
            && lane(page, "order:1").contains("bar hold")
            && lane(page, "order:1").contains("bar wait")
            && lane(page, "stock:7").contains("bar wait")
    })
    .await;
    println!(
        "the page showed both locks {:?} after the start",
        started.elapsed()
    );
    let order = row(&page, "order:1");
    assert!(
        order.contains("<span class=\"service\">orders-api</span>"),
        "the holder's service: {order}"
    );
    assert!(
        order.contains("in orders::place_order"),
        "the holder's site: {order}"
    );
    assert!(
        order.contains(&format!("pid {}", std::process::id())),
        "the holder's pid: {order}"
    );
    let stock = row(&page, "stock:7");
    assert!(
        stock.contains("title=\"1 keeping a place"),
        "the fair lock's waiter: {stock}"
    );
    assert!(
        order.contains("1 client(s) subscribed"),
        "the plain lock's waiting client: {order}"
    );
    assert!(
        lane(&page, "order:1").contains("bar wait"),
        "the wait on the timeline: {page}"
    );
    assert!(!page.contains("s3cret"), "the token never reaches the page");

    // A screenshot, kept as the test's artefact, and as the README's picture when
    // asked.
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web.png");
    let _ = browse(
        &browser,
        &still,
        &[&format!("--screenshot={}", shot.display())],
    );
    let size = std::fs::metadata(&shot).map(|meta| meta.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "a screenshot at {} ({size} bytes)",
        shot.display()
    );
    println!("screenshot: {}", shot.display());
    if std::env::var_os("DISTLOCK_UPDATE_SCREENSHOT").is_some_and(|on| on == "1") {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/web.png");
        std::fs::copy(&shot, &docs).expect("the screenshot is copied to docs/");
        println!("README's picture replaced: {}", docs.display());
    }

    // Refused without the token: by the server, and the page says why.
    let body = format!("{{\"id\":\"{}\",\"reason\":\"test\"}}", hex("order:1"));
    let (status, answer) = post(&address, "/api/force-unlock", &body, None);
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = post(&address, "/api/force-unlock", &body, Some("wrong"));
    assert_eq!(status, 403, "{answer}");
    let refused = dom(
        &browser,
        &format!("{address}#still&unlock=order:1&reason=test&send"),
    );
    assert!(
        refused.contains("refused (HTTP 403): refused: the admin token is missing or wrong"),
        "the page says why: {refused}"
    );
    assert!(!held.is_lost(), "the refused force-unlock changed nothing");

    // With the token: deleted, the holder is told, the waiter gets it.
    let (status, answer) = post(&address, "/api/force-unlock", &body, Some("s3cret"));
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"deleted\":true"), "{answer}");
    let told = Instant::now();
    tokio::time::timeout(Duration::from_secs(15), held.lost())
        .await
        .expect("the holder is told it lost order:1");
    println!(
        "the holder was told {:?} after the force-unlock",
        told.elapsed()
    );
    let next = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter gets order:1")
        .expect("the waiter task")
        .expect("the waiter holds order:1");
    let page = dom_until(&browser, &still, Duration::from_secs(15), |page| {
        row(page, "order:1").contains("billing::charge")
    })
    .await;
    assert!(
        row(&page, "order:1").contains("billing"),
        "the new holder: {}",
        row(&page, "order:1")
    );
    drop(next);
    drop(queue_head);
    fair_waiter
        .await
        .expect("the fair waiter task")
        .expect("it got stock:7");
    drop(web);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_namespace_is_an_empty_page_that_says_so() {
    let Some(browser) = chromium() else { return };
    let server = RedisServer::start().expect("a redis-server");
    let url = server.url();
    let locks = client(&url, "orders-api").await;
    let _held = locks.lock("order:1").await.expect("order:1 is held");
    let (web, address) = serve(&url, &["--namespace", "no-such-ns"]).await;
    let page = dom_until(
        &browser,
        &format!("{address}#still"),
        Duration::from_secs(20),
        |page| page.contains("No lock is held in namespace"),
    )
    .await;
    assert!(
        page.contains("No lock is held in namespace `no-such-ns`"),
        "the page says the namespace has no lock: {page}"
    );
    assert!(
        !page.contains("order:1"),
        "a lock of another namespace is not shown"
    );
    drop(web);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_goes_away_is_shown_and_the_page_recovers_never_showing_the_password() {
    // The server asks for a password, which the URL carries and nothing shows.
    const PASSWORD: &str = "pw-never-shown";
    let Some(browser) = chromium() else { return };
    let mut server = RedisServer::builder()
        .password(PASSWORD)
        .start()
        .expect("a redis-server");
    let url = server.url();
    assert!(url.contains(PASSWORD), "{url}");
    let (web, address, said) = serve_saying(&url, &["--refresh-ms", "300"]).await;
    assert!(!said.contains(PASSWORD), "the address line: {said}");
    let unseen = |page: &str, when: &str| {
        assert!(
            !page.contains(PASSWORD),
            "the password on the page {when}: {page}"
        );
        let state = get(&address, "/api/state");
        assert!(
            state.contains("\"servers\":\"127.0.0.1:") && !state.contains(PASSWORD),
            "the password in the page's state {when}: {state}"
        );
    };
    let still = format!("{address}#still");
    {
        let locks = client(&url, "orders-api").await;
        let _held = locks.lock("order:1").await.expect("order:1 is held");
        let page = dom_until(&browser, &still, Duration::from_secs(20), |page| {
            !row(page, "order:1").is_empty()
        })
        .await;
        assert!(
            !row(&page, "order:1").is_empty(),
            "the lock is shown: {page}"
        );
        unseen(&page, "with the server up");
        server.stop().expect("the server stops");
        let page = dom_until(&browser, &still, Duration::from_secs(20), |page| {
            page.contains("Redis is unreachable")
        })
        .await;
        assert!(
            page.contains("Redis is unreachable"),
            "the page says so: {page}"
        );
        assert!(
            page.contains("The page recovers by itself") && !row(&page, "order:1").is_empty(),
            "the last read stays on the page, marked: {page}"
        );
        unseen(&page, "with the server gone");
    }
    server.restart().expect("the server comes back");
    let locks = client(&url, "billing").await;
    let _held = locks.lock("invoice:9").await.expect("invoice:9 is held");
    let back = Instant::now();
    // Its holder is named by its first renewal, 1 s after the grant.
    let page = dom_until(&browser, &still, Duration::from_secs(20), |page| {
        row(page, "invoice:9").contains("billing") && !page.contains("Redis is unreachable")
    })
    .await;
    println!(
        "the page recovered {:?} after the server came back",
        back.elapsed()
    );
    assert!(!page.contains("Redis is unreachable"), "recovered: {page}");
    assert!(
        row(&page, "invoice:9").contains("billing"),
        "a read after the restart: {page}"
    );
    unseen(&page, "once the server is back");
    drop(web);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_of_waits_is_drawn_and_marked() {
    let Some(browser) = chromium() else { return };
    let server = RedisServer::start().expect("a redis-server");
    let url = server.url();
    // The detector would break the cycle after its threshold: a long one keeps it.
    let chain = |service: &'static str, first: &'static str, second: &'static str| {
        let url = url.clone();
        tokio::spawn(async move {
            let locks = LockClient::builder()
                .url(&url)
                .service(service)
                .deadlock_check_after(Some(Duration::from_secs(60)))
                .connect()
                .await
                .expect("connect");
            let outer = locks.lock(first).await.expect("the first lock");
            tokio::time::sleep(Duration::from_millis(300)).await;
            let inner = outer
                .scope(std::future::IntoFuture::into_future(
                    locks.lock(second).wait(Duration::from_secs(60)),
                ))
                .await;
            drop(inner);
        })
    };
    let a = chain("chain-a", "left", "right");
    let b = chain("chain-b", "right", "left");
    let (web, address) = serve(&url, &["--refresh-ms", "300"]).await;
    let page = dom_until(
        &browser,
        &format!("{address}#still"),
        Duration::from_secs(20),
        |page| page.contains("edge waits cycle"),
    )
    .await;
    assert!(
        page.contains("<section id=\"graph-section\">"),
        "the graph is shown: {page}"
    );
    assert!(
        page.contains("Cycle: these chains wait for each other"),
        "{page}"
    );
    assert_eq!(
        page.matches("edge waits cycle").count(),
        2,
        "two waits: {page}"
    );
    assert_eq!(
        page.matches("edge held_by cycle").count(),
        2,
        "two holds: {page}"
    );
    a.abort();
    b.abort();
    drop(web);
}

/// The `calls` of the commands the page's reader sends, from `INFO commandstats`.
fn reader_calls(server: &RedisServer) -> u64 {
    let stats = server
        .cmd(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    stats
        .lines()
        .filter_map(|line| {
            let (command, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let counted = ["scan", "hgetall", "pttl", "pubsub|numsub", "get", "time"];
            if !counted.contains(&command) {
                return None;
            }
            rest.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Follows the event stream at `address` until `reads` reads after the one already
/// published are announced (or `limit` passed), calling `probe` as each one is:
/// when each was announced, its revision, and what `probe` found then.
fn on_each_read<T>(
    address: &str,
    reads: usize,
    limit: Duration,
    mut probe: impl FnMut() -> T,
) -> Vec<(Instant, u64, T)> {
    let host = address.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(host).expect("the page's server answers");
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("a read timeout");
    let request =
        format!("GET /api/events HTTP/1.1\r\nhost: {host}\r\naccept: text/event-stream\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .expect("the request is sent");
    let deadline = Instant::now() + limit;
    let mut text = String::new();
    let mut buffer = [0u8; 4096];
    let mut seen = Vec::new();
    while seen.len() <= reads && Instant::now() < deadline {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => text.push_str(&String::from_utf8_lossy(&buffer[..read])),
            Err(_) => continue,
        }
        let revisions: Vec<u64> = text
            .split("event: state\ndata: ")
            .skip(1)
            .filter_map(|rest| rest.split_once('\n')?.0.trim().parse().ok())
            .collect();
        for revision in revisions.into_iter().skip(seen.len()) {
            seen.push((Instant::now(), revision, probe()));
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_locks_are_paged_and_read_within_the_budget() {
    const LOCKS: usize = 10_000;
    /// `--max-commands`' default: README's figures are for it.
    const BUDGET: f64 = 5_000.0;
    let Some(browser) = chromium() else { return };
    let server = RedisServer::start().expect("a redis-server");
    let url = server.url();
    let locks = LockClient::builder()
        .url(&url)
        .service("bulk")
        .default_lease(Duration::from_secs(120))
        .connect()
        .await
        .expect("connect");
    let taking = Instant::now();
    let mut guards = Vec::with_capacity(LOCKS);
    for chunk in 0..LOCKS / 250 {
        let mut set = tokio::task::JoinSet::new();
        for i in chunk * 250..(chunk + 1) * 250 {
            let locks = locks.clone();
            set.spawn(async move { locks.lock(format!("job:{i:05}")).await });
        }
        while let Some(taken) = set.join_next().await {
            guards.push(taken.expect("a task").expect("a lock"));
        }
    }
    println!("{LOCKS} locks taken in {:?}", taking.elapsed());

    let started = Instant::now();
    let (web, address) = serve(&url, &["--refresh-ms", "300"]).await;
    let still = format!("{address}#still");
    let page = dom_until(&browser, &still, Duration::from_secs(60), |page| {
        page.contains("page 1 of 100")
    })
    .await;
    let first = started.elapsed();
    println!("the first page of {LOCKS} locks showed {first:?} after the start");
    assert!(
        page.contains("Locks held <span id=\"count\">(10000)</span>"),
        "all counted: {page:.2000}"
    );
    assert_eq!(
        page.matches("<tr data-name=").count(),
        100,
        "one page of 100 rows"
    );
    assert!(first < Duration::from_secs(60), "{first:?}");
    let one = Instant::now();
    let again = dom(
        &browser,
        &format!("{address}#still&filter=job:09&sort=name&dir=desc"),
    );
    let load = one.elapsed();
    println!("a filtered, sorted page loaded in {load:?}");
    assert!(
        again.contains("<tr data-name=\"job:09999\">"),
        "sorted down, filtered: {again:.2000}"
    );
    assert!(again.contains("(1000 of 10000 match)"), "{again:.2000}");
    assert!(load < Duration::from_secs(15), "{load:?}");

    // The reader's cost on the server, at the default budget: the commands of two
    // whole reads (counted by the server between the announcements of the read
    // before them and of the second), over the time from the first one's start to
    // the start of the read after them: the pacing holds from start to start, so a
    // read that took longer than another (the machine busy) does not count.
    let reads = tokio::task::block_in_place(|| {
        on_each_read(&address, 3, Duration::from_secs(40), || {
            let state = get(&address, "/api/state?per=1");
            let field = |name: &str| -> u64 {
                let key = format!("\"{name}\":");
                let rest = &state[state
                    .find(&key)
                    .unwrap_or_else(|| panic!("{name}: {state:.300}"))
                    + key.len()..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().unwrap_or_else(|err| panic!("{name}: {err}"))
            };
            (
                reader_calls(&server),
                field("revision"),
                field("read_started_ms"),
            )
        })
    });
    assert!(reads.len() >= 4, "three reads announced: {}", reads.len());
    for (_, revision, (_, shown, _)) in &reads {
        assert_eq!(
            revision, shown,
            "the state read after an announcement is its read's"
        );
    }
    let (before, first_start) = (reads[0].2 .0, reads[1].2 .2);
    let (after, end_start) = (reads[2].2 .0, reads[3].2 .2);
    #[allow(clippy::cast_precision_loss)]
    let secs = end_start.saturating_sub(first_start) as f64 / 1000.0;
    let count = 2.0;
    #[allow(clippy::cast_precision_loss)]
    let sent = (after - before) as f64;
    let per_read = sent / count;
    println!(
        "at {LOCKS} held locks: {per_read:.0} commands a read, {:.3} reads a second \
         (one every {:.2}s), {:.0} commands a second (budget {BUDGET})",
        count / secs,
        secs / count,
        sent / secs
    );
    #[allow(clippy::cast_precision_loss)]
    let least = 2.0 * LOCKS as f64;
    assert!(
        (least..least + 100.0).contains(&per_read),
        "about 2 commands a lock: {per_read}"
    );
    assert!(
        sent / secs <= BUDGET * 1.05,
        "{sent} commands in {secs:.2}s: over the budget of {BUDGET} a second"
    );
    assert!(
        count / secs <= BUDGET / per_read * 1.05,
        "{count} reads in {secs:.2}s"
    );
    drop(web);
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_is_shown_by_owner_id_until_its_client_describes_it() {
    use distlock::layout;
    let Some(browser) = chromium() else { return };
    let server = RedisServer::start().expect("a redis-server");
    let url = server.url();
    // A hold as a client writes it, before (or without) its `#who:` field.
    let key = String::from_utf8(layout::lock_key("distlock", b"late:1")).expect("a text key");
    let owner = "c0ffeec0ffee:1";
    server
        .cmd(&[
            "HSET",
            &key,
            layout::KIND,
            "lock",
            layout::LAYOUT,
            layout::LAYOUT_VERSION,
            owner,
            "1",
        ])
        .expect("HSET");
    server.cmd(&["PEXPIRE", &key, "60000"]).expect("PEXPIRE");
    let (web, address) = serve(&url, &["--refresh-ms", "300"]).await;
    let still = format!("{address}#still");
    let page = dom_until(&browser, &still, Duration::from_secs(20), |page| {
        !row(page, "late:1").is_empty()
    })
    .await;
    let late = row(&page, "late:1");
    assert!(
        late.contains("owner c0ffeec0…:1 (not described yet)"),
        "by owner id: {late}"
    );
    // Its client writes who it is (as with its first renewal): the page fills it in.
    let who = format!("{}{owner}", layout::WHO);
    server
        .cmd(&[
            "HSET",
            &key,
            &who,
            "1764650000000 4121 orders-api host-3 orders::place_order",
        ])
        .expect("HSET #who");
    let page = dom_until(&browser, &still, Duration::from_secs(20), |page| {
        row(page, "late:1").contains("orders-api")
    })
    .await;
    let late = row(&page, "late:1");
    assert!(
        late.contains("<span class=\"service\">orders-api</span> on <span class=\"host\">host-3</span>, pid 4121"),
        "described: {late}"
    );
    assert!(late.contains("in orders::place_order"), "{late}");
    drop(web);
}

/// Reads the event stream at `address` until `count` `state` events came (or
/// `limit` passed); returns their revisions.
fn state_events(address: &str, count: usize, limit: Duration) -> Vec<u64> {
    let host = address.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(host).expect("the page's server answers");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a read timeout");
    let request =
        format!("GET /api/events HTTP/1.1\r\nhost: {host}\r\naccept: text/event-stream\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .expect("the request is sent");
    let deadline = Instant::now() + limit;
    let mut text = String::new();
    let mut buffer = [0u8; 4096];
    loop {
        let revisions: Vec<u64> = text
            .split("event: state\ndata: ")
            .skip(1)
            .filter_map(|rest| rest.split('\n').next()?.trim().parse().ok())
            .collect();
        if revisions.len() >= count || Instant::now() >= deadline {
            return revisions;
        }
        if let Ok(read) = stream.read(&mut buffer) {
            if read == 0 {
                return revisions;
            }
            text.push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_announces_each_read_and_ctrl_c_ends_it() {
    let server = RedisServer::start().expect("a redis-server");
    let url = server.url();
    let (web, address) = serve(&url, &["--refresh-ms", "300"]).await;
    let revisions =
        tokio::task::block_in_place(|| state_events(&address, 3, Duration::from_secs(10)));
    assert!(revisions.len() >= 3, "three reads announced: {revisions:?}");
    assert!(
        revisions.windows(2).all(|pair| pair[0] < pair[1]),
        "{revisions:?}"
    );
    // A tab still listening does not keep the command from stopping.
    let host = address
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut open = TcpStream::connect(&host).expect("a connection");
    open.write_all(format!("GET /api/events HTTP/1.1\r\nhost: {host}\r\n\r\n").as_bytes())
        .expect("the request is sent");
    open.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a read timeout");
    let mut first = [0u8; 256];
    let read = open.read(&mut first).expect("the stream answers");
    assert!(
        String::from_utf8_lossy(&first[..read]).contains("text/event-stream"),
        "an event stream is open"
    );
    let stopping = Instant::now();
    let code = tokio::time::timeout(Duration::from_secs(15), web.interrupt())
        .await
        .expect("distlock web stops on Ctrl-C");
    println!("stopped {:?} after Ctrl-C", stopping.elapsed());
    assert_eq!(code, Some(0), "exit 0 on Ctrl-C");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_is_off_without_a_token_and_the_token_may_come_from_the_environment() {
    let server = RedisServer::start().expect("a redis-server");
    let url = server.url();
    let locks = client(&url, "orders-api").await;
    let held = locks.lock("order:1").await.expect("order:1 is held");
    let body = |reason: &str| format!("{{\"id\":\"{}\",\"reason\":\"{reason}\"}}", hex("order:1"));

    // No token at all: off, whatever the request carries.
    let (off, address, said) = serve_saying(&url, &[]).await;
    assert!(said.contains("force-unlock off: no admin token"), "{said}");
    let (status, answer) = post(&address, "/api/force-unlock", &body("test"), Some("any"));
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("force-unlock is off"), "{answer}");
    drop(off);

    // The token from DISTLOCK_ADMIN_TOKEN, never printed.
    let all = ["--url", url.as_str(), "web", "--bind", "127.0.0.1:0"];
    let mut web = Running::start_with_env(&all, &[("DISTLOCK_ADMIN_TOKEN", "from-env")]);
    let said = web.next_line(Duration::from_secs(20)).await;
    assert!(
        said.contains("force-unlock on, with the admin token"),
        "{said}"
    );
    assert!(!said.contains("from-env"), "{said}");
    let address = said
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("the address in {said:?}"))
        .to_owned();
    let (status, answer) = post(&address, "/api/force-unlock", &body("test"), None);
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = post(&address, "/api/force-unlock", &body(" "), Some("from-env"));
    assert_eq!(status, 400, "a reason is needed: {answer}");
    assert!(!held.is_lost(), "nothing refused changed the lock");
    let (status, answer) = post(
        &address,
        "/api/force-unlock",
        &body("test"),
        Some("from-env"),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"deleted\":true"), "{answer}");
    tokio::time::timeout(Duration::from_secs(15), held.lost())
        .await
        .expect("the holder is told it lost order:1");
    drop(web);
}
