//! `capstan certificate`: the server's certificates, as k3s's `certificate` command.
//! `check` lists every certificate under `<data-dir>/tls` with its end; `rotate` moves the leaf
//! certificates (all, or those `--service` names) with their keys into
//! `<data-dir>/tls/expired-<unix time>/`, so that the next start of `capstan server` issues new
//! ones from the same CAs. The CAs and the service account key are kept, so kubeconfigs that
//! trust the cluster CA keep working and issued tokens stay valid.

use std::path::PathBuf;

use anyhow::Context as _;
use capstan_apiserver::pki;
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub(crate) enum CertificateCommand {
    /// List the server's certificates with their ends.
    Check(CheckArgs),
    /// Move the server's leaf certificates aside (backed up under
    /// `<data-dir>/tls/expired-<time>/`); the next start issues new ones from the same CAs.
    Rotate(RotateArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The server's data directory.
    #[arg(long, env = "CAPSTAN_DATA_DIR", default_value_os_t = crate::default_data_dir())]
    data_dir: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct RotateArgs {
    /// The server's data directory.
    #[arg(long, env = "CAPSTAN_DATA_DIR", default_value_os_t = crate::default_data_dir())]
    data_dir: PathBuf,
    /// Only these certificates, by file name without `.crt` (`admin`, `serving`,
    /// `scheduler`, ...; repeatable or comma-separated). Default: every leaf certificate.
    #[arg(long = "service", value_delimiter = ',')]
    services: Vec<String>,
}

/// How a certificate stands at `now`.
fn status(cert: &pki::CertificateFile, now: time::OffsetDateTime) -> &'static str {
    if cert.not_after <= now {
        "EXPIRED"
    } else if !cert.is_ca && cert.not_after <= now + pki::RENEW_WITHIN {
        "RENEW AT START"
    } else {
        "OK"
    }
}

/// The table `check` prints for `certs` at `now`.
fn table(certs: &[pki::CertificateFile], now: time::OffsetDateTime) -> String {
    let rows: Vec<[String; 5]> = certs
        .iter()
        .map(|c| {
            [
                c.name.clone(),
                if c.is_ca { "CA" } else { "leaf" }.to_owned(),
                c.subject.clone(),
                format_time(c.not_after),
                status(c, now).to_owned(),
            ]
        })
        .collect();
    let header = ["NAME", "KIND", "SUBJECT", "EXPIRES", "STATUS"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

fn format_time(t: time::OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

pub(crate) fn run(command: CertificateCommand) -> anyhow::Result<()> {
    match command {
        CertificateCommand::Check(args) => {
            let dir = args.data_dir.join("tls");
            let certs = pki::inventory(&dir)
                .with_context(|| format!("cannot list the certificates under {}", dir.display()))?;
            print!("{}", table(&certs, time::OffsetDateTime::now_utc()));
            Ok(())
        }
        CertificateCommand::Rotate(args) => {
            let dir = args.data_dir.join("tls");
            let stamp = time::OffsetDateTime::now_utc().unix_timestamp().to_string();
            let (backup, moved) = pki::rotate(&dir, &args.services, &stamp).with_context(|| {
                format!("cannot rotate the certificates under {}", dir.display())
            })?;
            for name in &moved {
                println!("{name}: certificate and key moved to {}", backup.display());
            }
            println!(
                "{} certificate(s) rotated; restart capstan server to issue new ones from the same CA",
                moved.len()
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_reports_ends_and_what_renews_at_start() {
        // 2030-01-01T00:00:00Z.
        let now = time::OffsetDateTime::from_unix_timestamp(1_893_456_000).unwrap();
        let cert = |name: &str, days: i64, is_ca: bool| pki::CertificateFile {
            name: name.to_owned(),
            subject: format!("CN={name}"),
            not_before: now - time::Duration::days(1),
            not_after: now + time::Duration::days(days),
            is_ca,
        };
        let out = table(
            &[
                cert("admin", 30, false),
                cert("ca", 3000, true),
                cert("old", -1, false),
                cert("serving", 200, false),
            ],
            now,
        );
        assert_eq!(
            out,
            "NAME      KIND   SUBJECT      EXPIRES                STATUS\n\
             admin     leaf   CN=admin     2030-01-31T00:00:00Z   RENEW AT START\n\
             ca        CA     CN=ca        2038-03-20T00:00:00Z   OK\n\
             old       leaf   CN=old       2029-12-31T00:00:00Z   EXPIRED\n\
             serving   leaf   CN=serving   2030-07-20T00:00:00Z   OK\n"
        );
    }
}
