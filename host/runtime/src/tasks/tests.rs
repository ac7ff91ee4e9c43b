use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::mpsc;

use super::*;

fn chain() -> Part {
    Part::Chain("eth".into())
}

#[tokio::test]
async fn a_critical_task_that_panics_stops_the_server_with_its_message() {
    let tasks = Tasks::new(CancellationToken::new());
    tasks.critical("eth pipeline", chain(), async {
        panic!("a broken window");
        #[allow(unreachable_code)]
        ()
    });
    let reason = tasks.failed().await;
    assert_eq!(reason, "eth pipeline stopped: panicked: a broken window");
    assert_eq!(tasks.trouble(&chain()), Some(Trouble::Failed { reason }));
}

#[tokio::test]
async fn a_task_returning_before_the_server_stops_has_failed() {
    let tasks = Tasks::new(CancellationToken::new());
    let (ended, mut seen) = mpsc::channel::<()>(1);
    tasks.part("usage flush", Part::Service("usage"), async move {
        let _ended = ended;
    });
    // The sender drops as the task returns; the supervisor then looks.
    assert!(seen.recv().await.is_none());
    tasks.close();
    tasks.wait().await;
    let trouble = tasks.trouble(&Part::Service("usage")).expect("failed");
    assert_eq!(trouble.state(), "failed");
    assert_eq!(
        trouble.reason(),
        "usage flush stopped: it returned before the server stopped"
    );
}

#[tokio::test]
async fn an_error_is_the_reason_with_its_causes() {
    let tasks = Tasks::new(CancellationToken::new());
    tasks.part("webhooks follower", Part::Service("webhooks"), async {
        Err::<(), _>(anyhow::anyhow!("the feed ended").context("following the store"))
    });
    tasks.close();
    tasks.wait().await;
    assert_eq!(
        tasks
            .trouble(&Part::Service("webhooks"))
            .map(|t| t.reason().to_string()),
        Some("webhooks follower stopped: following the store: the feed ended".into())
    );
}

#[tokio::test]
async fn tasks_ending_once_the_server_stops_have_not_failed() {
    let stopping = CancellationToken::new();
    let tasks = Tasks::new(stopping.clone());
    for (name, kind) in [
        ("a", Kind::Critical),
        ("b", Kind::Part),
        ("c", Kind::Restarting),
    ] {
        let stopped = stopping.clone();
        let mut once = Some(async move { stopped.cancelled().await });
        tasks.supervise(name.into(), chain(), kind, move || {
            once.take().expect("run once")
        });
    }
    stopping.cancel();
    tasks.close();
    tasks.wait().await;
    assert_eq!(tasks.trouble(&chain()), None);
    assert!(
        tokio::time::timeout(Duration::from_millis(1), tasks.failed())
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn a_restarting_task_runs_again_after_its_backoff() {
    let stopping = CancellationToken::new();
    let tasks = Tasks::new(stopping.clone());
    let runs = Arc::new(AtomicU32::new(0));
    let (started, mut starts) = mpsc::unbounded_channel();
    let counted = runs.clone();
    let stopped = stopping.clone();
    tasks.restarting("eth source", chain(), move || {
        let run = counted.fetch_add(1, Ordering::SeqCst);
        let (started, stopped) = (started.clone(), stopped.clone());
        async move {
            let _ = started.send(run);
            if run == 0 {
                panic!("lost the node");
            }
            stopped.cancelled().await;
        }
    });
    assert_eq!(starts.recv().await, Some(0));
    let begun = tokio::time::Instant::now();
    assert_eq!(starts.recv().await, Some(1));
    // Paused time only moves through the backoff's sleep.
    let waited = begun.elapsed();
    assert!(
        waited >= MIN_RESTART_DELAY && waited <= MIN_RESTART_DELAY * 2,
        "{waited:?}"
    );
    let standing = tasks.standings()[&chain()]["eth source"].clone();
    assert_eq!(standing.restarts, 1);
    assert_eq!(standing.trouble, None);
    stopping.cancel();
    tasks.close();
    tasks.wait().await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_restarting_task_is_restarting_while_it_waits() {
    let stopping = CancellationToken::new();
    let tasks = Tasks::new(stopping.clone());
    tasks.restarting("bus follower", Part::Service("keys"), || async {
        Err::<(), _>(anyhow::anyhow!("the bus went away"))
    });
    // Paused time moves only once every task is idle: the first run has
    // ended and the supervisor waits out its backoff (at least 1 s).
    tokio::time::sleep(MIN_RESTART_DELAY / 2).await;
    let trouble = tasks.trouble(&Part::Service("keys")).expect("restarting");
    assert_eq!(trouble.state(), "restarting");
    assert!(
        trouble
            .reason()
            .starts_with("bus follower stopped: the bus went away; started again in "),
        "{}",
        trouble.reason()
    );
    stopping.cancel();
    tasks.close();
    tasks.wait().await;
}

#[test]
fn the_backoff_doubles_up_to_its_bound() {
    let mut delays = backoff();
    let first = delays.next().expect("a delay");
    assert!(first >= MIN_RESTART_DELAY && first <= MIN_RESTART_DELAY * 2);
    let later: Vec<_> = delays.take(10).collect();
    assert!(later.iter().all(|d| *d <= MAX_RESTART_DELAY * 2));
    assert!(later.last().expect("ten") >= &MAX_RESTART_DELAY);
}
