//! The judgement of the NCCL facts: `nccl.library` (which NCCL, which version), `nccl.plugin`
//! (the file NCCL would load, whether it loads, the table that release picks), `nccl.shadow`
//! (copies hidden behind others on the library path) and `nccl.net` (`NCCL_NET` naming another
//! network).

use super::*;

/// The release rules a version-less judgement goes through: one representative per rule.
fn representative_releases() -> Vec<NcclVersion> {
    RELEASES
        .iter()
        .map(|&minor| NcclVersion {
            major: 2,
            minor,
            patch: 0,
        })
        .collect()
}

/// The table a release picks from `tables` (`None`: none it knows).
pub fn picked_table(v: NcclVersion, tables: &[u32]) -> Option<u32> {
    v.table_order().into_iter().find(|t| tables.contains(t))
}

fn list_tables(t: &[u32]) -> String {
    if t.is_empty() {
        return "none".to_string();
    }
    t.iter()
        .map(|n| format!("v{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The NCCL checks.
pub fn nccl_checks(f: &NcclFacts) -> Vec<Check> {
    let mut out = vec![library_check(f)];
    out.push(plugin_check(f));
    out.extend(shadow_check(f));
    out.extend(net_check(f));
    out
}

fn library_check(f: &NcclFacts) -> Check {
    let dirs = format!(
        "library path (LD_LIBRARY_PATH, /etc/ld.so.conf, defaults): {}",
        f.search
            .dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    );
    let Some(lib) = &f.library else {
        return Check::new(
            "nccl.library",
            "libnccl.so.2",
            Status::Info,
            "libnccl.so.2 is not on this process's library path (normal where the job's image, not \
             this one, brings NCCL): the plugin's table is judged for every NCCL release",
        )
        .evidence(dirs);
    };
    let first = &lib.copies[0];
    let mut c = match lib.version {
        Some(v) => Check::new(
            "nccl.library",
            "libnccl.so.2",
            Status::Ok,
            format!("NCCL {v} at {}", first.path.display()),
        ),
        None => Check::new(
            "nccl.library",
            "libnccl.so.2",
            Status::Info,
            format!(
                "NCCL at {}, version unknown (its file name {} states none): the plugin's table is \
                 judged for every NCCL release",
                first.path.display(),
                first.real.display()
            ),
        ),
    };
    c = c.evidence(format!(
        "{} -> {}",
        first.path.display(),
        first.real.display()
    ));
    for other in &lib.copies[1..] {
        c = c.evidence(format!(
            "also {} (-> {}), shadowed by the first",
            other.path.display(),
            other.real.display()
        ));
    }
    c.evidence(dirs)
}

const FIX_NAME: &str = "set NCCL_NET_PLUGIN=ferro (NCCL then loads libnccl-net-ferro.so from the \
    library path) or to the plugin's full path, and make sure its directory is on LD_LIBRARY_PATH \
    or in /etc/ld.so.conf.d";

fn plugin_check(f: &NcclFacts) -> Check {
    let subject = "NCCL_NET_PLUGIN";
    let setting = match f.net_plugin.as_deref() {
        Some(v) => format!("NCCL_NET_PLUGIN={v}"),
        None => format!("NCCL_NET_PLUGIN unset (NCCL loads {DEFAULT_PLUGIN})"),
    };
    match &f.request {
        PluginRequest::NoPlugin => {
            return Check::new(
                "nccl.plugin",
                subject,
                Status::Warning,
                "NCCL_NET_PLUGIN=none: NCCL loads no network plugin, so this plugin is never used",
            )
            .fix("unset NCCL_NET_PLUGIN or set it to ferro");
        }
        PluginRequest::Static => {
            return Check::new(
                "nccl.plugin",
                subject,
                Status::Info,
                "NCCL_NET_PLUGIN=STATIC_PLUGIN: NCCL looks for the tables in the application itself; \
                 the doctor cannot see them",
            );
        }
        PluginRequest::Files(_) => {}
    }
    let evidence: Vec<String> = f
        .candidates
        .iter()
        .map(|c| match c.copies.first() {
            None => format!("{}: not found", c.name),
            Some(first) => format!(
                "{}: {} -> {}{}; tables {}{}",
                c.name,
                first.path.display(),
                first.real.display(),
                if c.ours { " (Ferro)" } else { "" },
                list_tables(&c.tables()),
                if c.load_problems.is_empty() {
                    String::new()
                } else {
                    format!("; does not load: {}", c.load_problems.join("; "))
                }
            ),
        })
        .collect();
    // NCCL takes the first candidate the loader loads.
    let chosen = f.candidates.iter().find(|c| c.loads());
    let broken: Vec<&Candidate> = f
        .candidates
        .iter()
        .filter(|c| !c.copies.is_empty() && !c.loads())
        .collect();
    let version = f.library.as_ref().and_then(|l| l.version);
    let mut c = match chosen {
        None if !broken.is_empty() => {
            let b = broken[0];
            Check::new(
                "nccl.plugin",
                subject,
                Status::Fail,
                format!(
                    "{setting}: {} does not load: {}; NCCL falls back to its own transports",
                    b.copies[0].path.display(),
                    b.load_problems.join("; ")
                ),
            )
            .fix("install the plugin built for this host (its architecture and glibc), or a newer glibc")
        }
        // The doctor often runs where the job does not (a DaemonSet, a login shell): the
        // job's environment may well find the plugin, so this is worth knowing, not a warning.
        None => Check::new(
            "nccl.plugin",
            subject,
            Status::Info,
            format!(
                "{setting}: no such plugin on this process's library path: NCCL started with this \
                 environment would not use this plugin"
            ),
        )
        .fix(FIX_NAME),
        Some(ch) if !ch.ours => Check::new(
            "nccl.plugin",
            subject,
            Status::Fail,
            format!(
                "{setting}: NCCL would load {} (-> {}), another plugin, not Ferro",
                ch.copies[0].path.display(),
                ch.copies[0].real.display()
            ),
        )
        .fix(FIX_NAME),
        Some(ch) => table_verdict(&setting, ch, version),
    };
    c.evidence = evidence;
    c
}

/// The plugin NCCL would load is ours: does it export a table the installed NCCL (or, version
/// unknown, every release) picks?
fn table_verdict(setting: &str, ch: &Candidate, version: Option<NcclVersion>) -> Check {
    let tables = ch.tables();
    let path = ch.copies[0].path.display();
    match version {
        Some(v) => match picked_table(v, &tables) {
            Some(t) => Check::new(
                "nccl.plugin",
                "NCCL_NET_PLUGIN",
                Status::Ok,
                format!("{setting}: {path} loads; NCCL {v} would use its ncclNetPlugin_v{t} table"),
            ),
            None => Check::new(
                "nccl.plugin",
                "NCCL_NET_PLUGIN",
                Status::Fail,
                format!(
                    "{setting}: {path} exports {}, none of the tables NCCL {v} looks for ({}): NCCL skips it",
                    list_tables(&tables),
                    list_tables(&v.table_order())
                ),
            )
            .fix("install a plugin build that exports the table of this NCCL release, or a newer NCCL"),
        },
        None => {
            let per: Vec<(NcclVersion, Option<u32>)> = representative_releases()
                .into_iter()
                .map(|r| (r, picked_table(r, &tables)))
                .collect();
            let text = per
                .iter()
                .map(|(r, t)| {
                    format!(
                        "2.{}+: {}",
                        r.minor,
                        t.map_or("none".to_string(), |t| format!("v{t}"))
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            let unserved: Vec<String> = per
                .iter()
                .filter(|(_, t)| t.is_none())
                .map(|(r, _)| format!("2.{}", r.minor))
                .collect();
            if unserved.is_empty() {
                Check::new(
                    "nccl.plugin",
                    "NCCL_NET_PLUGIN",
                    Status::Ok,
                    format!("{setting}: {path} loads; NCCL would use its table {text}"),
                )
            } else {
                Check::new(
                    "nccl.plugin",
                    "NCCL_NET_PLUGIN",
                    Status::Warning,
                    format!(
                        "{setting}: {path} loads, but NCCL {} would find no table in it ({text})",
                        unserved.join(", ")
                    ),
                )
            }
        }
    }
}

/// Copies of the loaded plugin file further down the path, and a `libnccl-net.so` that is not
/// this plugin where NCCL would load it.
fn shadow_check(f: &NcclFacts) -> Option<Check> {
    let mut lines = Vec::new();
    let mut status = Status::Info;
    for c in &f.candidates {
        for later in c.copies.iter().skip(1) {
            let later_ours = is_ours_file(&f.search, later);
            if later_ours && !c.ours {
                status = Status::Fail;
            }
            lines.push(format!(
                "{} at {} (-> {}{}) is shadowed by {} (-> {}{})",
                c.name,
                later.path.display(),
                later.real.display(),
                if later_ours { ", Ferro" } else { "" },
                c.copies[0].path.display(),
                c.copies[0].real.display(),
                if c.ours { ", Ferro" } else { "" },
            ));
        }
    }
    // Set to a name, NCCL never loads libnccl-net.so; unset, it loads the first one.
    if f.net_plugin.is_some() {
        if let Some(d) = f
            .default_copies
            .first()
            .filter(|d| !is_ours_file(&f.search, d))
        {
            lines.push(format!(
                "{} (-> {}) is another plugin; it is not loaded while NCCL_NET_PLUGIN is set, \
                 and would be if it were unset",
                d.path.display(),
                d.real.display()
            ));
        }
    }
    if lines.is_empty() {
        return None;
    }
    let summary = if status == Status::Fail {
        format!(
            "a copy of Ferro on the library path is shadowed by another plugin: {}",
            lines[0]
        )
    } else {
        format!(
            "more than one plugin file on the library path: {}",
            lines[0]
        )
    };
    let mut c = Check::new("nccl.shadow", "library path", status, summary);
    if status == Status::Fail {
        c = c.fix(format!(
            "remove the other file, put Ferro's directory first on LD_LIBRARY_PATH, or {FIX_NAME}"
        ));
    }
    c.evidence = lines;
    Some(c)
}

/// `NCCL_NET`: NCCL uses only the network of that name.
fn net_check(f: &NcclFacts) -> Option<Check> {
    let net = f.net.as_deref()?.trim();
    let name = nccl_net_ferro::PLUGIN_NAME.to_string_lossy();
    if net.eq_ignore_ascii_case(&name) {
        return Some(Check::new(
            "nccl.net",
            "NCCL_NET",
            Status::Ok,
            format!("NCCL_NET={net}: NCCL uses only this plugin (and fails if it cannot)"),
        ));
    }
    let installed = f
        .candidates
        .iter()
        .find(|c| c.loads())
        .is_some_and(|c| c.ours);
    let c = if installed {
        Check::new(
            "nccl.net",
            "NCCL_NET",
            Status::Fail,
            format!(
                "NCCL_NET={net}: NCCL uses only the network named {net:?}; the installed {name} \
                 plugin is loaded but never used"
            ),
        )
    } else {
        Check::new(
            "nccl.net",
            "NCCL_NET",
            Status::Warning,
            format!("NCCL_NET={net}: NCCL uses only the network named {net:?}, not {name}"),
        )
    };
    Some(c.fix(format!("unset NCCL_NET or set NCCL_NET={name}")))
}
