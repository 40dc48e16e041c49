use super::*;

const EINVAL: i32 = 22;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn only_a_timed_out_change_is_retried_unless_all_is_set() {
    let p = RetryPolicy::default();
    assert!(p.retries_errno(ETIMEDOUT));
    assert!(!p.retries_errno(EINVAL));
    assert!(!p.retries_errno(0));
    let all = RetryPolicy { all: true, ..p };
    assert!(all.retries_errno(EINVAL));
    assert!(!all.retries_errno(0));
}

#[test]
fn the_wait_before_a_retry_grows_with_its_number() {
    let p = RetryPolicy::default();
    assert_eq!(p.next_attempt(1, ETIMEDOUT, ms(1000)), Some(ms(1100)));
    assert_eq!(p.next_attempt(2, ETIMEDOUT, ms(1000)), Some(ms(1200)));
    assert_eq!(p.next_attempt(34, ETIMEDOUT, ms(0)), Some(ms(3400)));
}

#[test]
fn a_change_is_attempted_retries_plus_one_times_at_most() {
    let p = RetryPolicy::default();
    assert!(p.next_attempt(34, ETIMEDOUT, ms(0)).is_some());
    assert_eq!(p.next_attempt(35, ETIMEDOUT, ms(0)), None);
    let none = RetryPolicy { retries: 0, ..p };
    assert_eq!(none.next_attempt(1, ETIMEDOUT, ms(0)), None);
}

#[test]
fn a_failure_the_policy_does_not_retry_gives_up_at_once() {
    let p = RetryPolicy::default();
    assert_eq!(p.next_attempt(1, EINVAL, ms(0)), None);
    let mut c = ConnectProgress::new(1);
    let e = c.failed(&p, EINVAL, ms(0)).unwrap_err();
    assert_eq!(e.attempts, 1);
    assert!(!e.retried);
    assert!(e.to_string().contains("not retried"), "{e}");
}

#[test]
fn the_longest_wait_with_nccls_defaults_is_about_a_minute() {
    assert_eq!(RetryPolicy::default().longest_wait(), ms(59_500));
}

#[test]
fn each_qp_goes_to_rtr_then_rts_in_order() {
    let mut c = ConnectProgress::new(2);
    let mut seen = Vec::new();
    while let Next::Change { qp, to } = c.next(ms(0)) {
        seen.push((qp, to));
        c.succeeded();
    }
    assert_eq!(
        seen,
        [
            (0, Transition::Rtr),
            (0, Transition::Rts),
            (1, Transition::Rtr),
            (1, Transition::Rts)
        ]
    );
    assert_eq!(c.next(ms(0)), Next::Done);
}

/// Calls every 10 ms, as NCCL's connect loop would make them; QP 1's move to RTR times out
/// `timeouts` times. Returns the attempts per change, the calls that answered "not yet" and the
/// outcome.
fn drive(timeouts: u32, policy: RetryPolicy) -> (u32, u32, Result<Duration, GaveUp>) {
    let mut c = ConnectProgress::new(2);
    let (mut attempts, mut waits, mut left) = (0, 0, timeouts);
    for call in 0..1_000_000u64 {
        let now = ms(10 * call);
        loop {
            match c.next(now) {
                Next::Done => return (attempts, waits, Ok(now)),
                Next::WaitUntil(due) => {
                    assert!(due > now);
                    waits += 1;
                    break;
                }
                Next::Change { qp, to } => {
                    if (qp, to) == (1, Transition::Rtr) {
                        attempts += 1;
                        if left > 0 {
                            left -= 1;
                            if let Err(e) = c.failed(&policy, ETIMEDOUT, now) {
                                return (attempts, waits, Err(e));
                            }
                            continue;
                        }
                    }
                    c.succeeded();
                }
            }
        }
    }
    unreachable!("the connection neither finished nor gave up");
}

#[test]
fn timed_out_changes_answer_not_yet_until_their_retry_is_due_then_connect() {
    let p = RetryPolicy::default();
    let (attempts, waits, out) = drive(3, p);
    assert_eq!(attempts, 4);
    // 100 + 200 + 300 ms of waits at one call per 10 ms.
    assert!((55..=60).contains(&waits), "{waits} calls answered not yet");
    let done = out.unwrap();
    assert!(done >= ms(600) && done < ms(700), "{done:?}");
}

#[test]
fn spent_retries_give_up_naming_the_qp_the_change_the_attempts_and_the_errno() {
    let p = RetryPolicy {
        retries: 3,
        sleep: ms(20),
        all: false,
    };
    let (attempts, _, out) = drive(10, p);
    let e = out.unwrap_err();
    assert_eq!(attempts, 4);
    assert_eq!(
        e,
        GaveUp {
            qp: 1,
            to: Transition::Rtr,
            attempts: 4,
            errno: ETIMEDOUT,
            retried: true
        }
    );
    let text = e.to_string();
    assert!(
        text.contains("QP 1 to RTR failed with errno 110 after 4 attempts"),
        "{text}"
    );
    assert!(text.contains("NCCL_IB_MQP_RETRY_CNT"), "{text}");
}

#[test]
fn a_success_forgets_the_failures_of_the_change_before() {
    let p = RetryPolicy::default();
    let mut c = ConnectProgress::new(1);
    c.failed(&p, ETIMEDOUT, ms(0)).unwrap();
    assert_eq!(c.next(ms(50)), Next::WaitUntil(ms(100)));
    assert_eq!(
        c.next(ms(100)),
        Next::Change {
            qp: 0,
            to: Transition::Rtr
        }
    );
    c.succeeded();
    assert_eq!(c.failures(), 0);
    assert_eq!(
        c.next(ms(100)),
        Next::Change {
            qp: 0,
            to: Transition::Rts
        }
    );
}
