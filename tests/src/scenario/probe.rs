//! `init-probe`: what a process sees when it loads and inits the plugin (used by host tests that
//! need a fresh process per environment, because the plugin reads its environment once).
//!
//! Output lines: `NAME <table name>`, `INIT <code> <name>` (first init), `INIT2 <code> <name>`
//! (second init), `DEVICES ok <n>` or `DEVICES err <code>`, then `LOG <LEVEL> <text>` per
//! logged line.

use super::one_line;
use crate::error::{HResult, HarnessError};
use crate::logger;
use crate::net::Net;
use crate::rank::Ctl;

pub(super) fn run(ctl: &Ctl) -> HResult<String> {
    let net = Net::global().map_err(HarnessError::Failed)?;
    ctl.say(&format!(
        "NAME {}",
        net.name().unwrap_or_else(|| "(NULL)".into())
    ));
    let code = |r: Result<(), ferro_ffi::ncclResult_t>| match r {
        Ok(()) => "0 ncclSuccess".to_string(),
        Err(c) => format!("{} {c:?}", c.0),
    };
    let first = net.init();
    ctl.say(&format!("INIT {}", code(first)));
    ctl.say(&format!("INIT2 {}", code(net.init())));
    match net.devices() {
        Ok(n) => ctl.say(&format!("DEVICES ok {n}")),
        Err(c) => ctl.say(&format!("DEVICES err {} {c:?}", c.0)),
    }
    for l in logger::logs() {
        ctl.say(&format!(
            "LOG {} {}",
            logger::level_name(l.level),
            one_line(&l.text)
        ));
    }
    Ok(format!("init {}", code(first)))
}
