//! What one critical section of the reliability suite does on Redis besides holding
//! the lock: an unfenced counter increment and a write to a fenced store.

use std::sync::Arc;

/// The fenced store: a Redis hash that accepts a write only with a fencing token at
/// least as high as the highest it has seen.
///
/// KEYS[1] the store hash (`token`, `value`, `accepted`, `refused`)
/// ARGV[1] the writer's fencing token, ARGV[2] the value
/// Returns 1 (accepted) or 0 (refused: a newer holder wrote already).
pub const FENCED_WRITE: &str = r"
local last = tonumber(redis.call('HGET', KEYS[1], 'token')) or 0
local token = tonumber(ARGV[1])
if token < last then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'token', token, 'value', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
return 1
";

/// What one critical section does on Redis, besides holding the lock: an unfenced
/// read → yield → write of a counter (a lost update reveals a real overlap) and a
/// fenced write (refused when a newer holder wrote first).
#[derive(Clone)]
pub struct Workload {
    conn: redis::aio::MultiplexedConnection,
    counter: String,
    store: String,
    script: Arc<redis::Script>,
}

impl Workload {
    /// A workload on `url` for lock `name`: keys `rel:{name}:counter` and `rel:{name}:store`.
    pub async fn connect(url: &str, name: &str) -> Workload {
        let client = redis::Client::open(url).expect("url");
        // No response timeout: a holder process frozen (SIGSTOP) with a write in
        // flight must find the reply after SIGCONT, not a timer that ran out while
        // it was stopped.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("workload connection");
        Workload {
            conn,
            counter: format!("rel:{name}:counter"),
            store: format!("rel:{name}:store"),
            script: Arc::new(redis::Script::new(FENCED_WRITE)),
        }
    }

    /// GET, yield, SET counter+1.
    pub async fn unfenced_increment(&self) {
        let value = self.counter().await;
        tokio::task::yield_now().await;
        let mut conn = self.conn.clone();
        let () = redis::cmd("SET")
            .arg(&self.counter)
            .arg(value + 1)
            .query_async(&mut conn)
            .await
            .expect("SET counter");
    }

    /// Writes `value` to the fenced store with `token`; whether it was accepted.
    pub async fn fenced_write(&self, token: u64, value: &str) -> bool {
        let mut conn = self.conn.clone();
        let accepted: i64 = self
            .script
            .key(&self.store)
            .arg(token)
            .arg(value)
            .invoke_async(&mut conn)
            .await
            .expect("fenced write");
        accepted == 1
    }

    /// The counter as stored.
    pub async fn counter(&self) -> u64 {
        let mut conn = self.conn.clone();
        let value: Option<u64> = redis::cmd("GET")
            .arg(&self.counter)
            .query_async(&mut conn)
            .await
            .expect("GET counter");
        value.unwrap_or(0)
    }

    /// How many fenced writes the store refused.
    pub async fn refused(&self) -> u64 {
        let mut conn = self.conn.clone();
        let value: Option<u64> = redis::cmd("HGET")
            .arg(&self.store)
            .arg("refused")
            .query_async(&mut conn)
            .await
            .expect("HGET refused");
        value.unwrap_or(0)
    }
}
