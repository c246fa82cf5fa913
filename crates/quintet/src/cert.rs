//! `quintet cert`: a certificate clients accept, for serving HTTPS on a machine without a
//! public name.
//!
//! The certificate most people make (`openssl req -x509 … -subj /CN=localhost`) fails in
//! both of quintet's usual clients: rustls refuses a CA certificate used as the server's
//! own (`CaUsedAsEndEntity`), and Node refuses a certificate whose name is only in the
//! common name (`ERR_TLS_CERT_ALTNAME_INVALID`). So this command makes what they expect, as
//! mkcert does: a small certificate authority (`quintet-ca.pem`, kept and reused, so
//! clients trust it once) and a server certificate it signs, naming every host as a
//! subject alternative name.

use std::{
    fs,
    net::IpAddr,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use clap::Args;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Arguments of `quintet cert`.
#[derive(Debug, Args)]
pub struct CertArgs {
    /// A name or address clients reach the server by; repeat for several
    /// [default: 127.0.0.1, ::1 and localhost]
    #[arg(long = "host", value_name = "HOST")]
    pub hosts: Vec<String>,

    /// Where to write quintet-ca.pem, quintet-ca-key.pem, cert.pem and key.pem (an
    /// authority already there is reused)
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,

    /// Days the server certificate is valid
    #[arg(long, default_value_t = 825, value_name = "DAYS")]
    pub days: u32,
}

/// The files [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The authority's certificate: what clients trust.
    pub ca: PathBuf,
    /// The server's certificate chain (leaf, then authority): `--tls-cert`.
    pub cert: PathBuf,
    /// The server's private key: `--tls-key`.
    pub key: PathBuf,
    /// Whether the authority was made now (else an earlier one was reused).
    pub new_authority: bool,
}

const CA: &str = "quintet-ca.pem";
const CA_KEY: &str = "quintet-ca-key.pem";

/// Write a server certificate for `hosts` (valid `days`) into `dir`, signed by the
/// authority there (made when missing).
pub fn generate(dir: &Path, hosts: &[String], days: u32) -> anyhow::Result<CertFiles> {
    if days == 0 {
        bail!("--days must be at least 1");
    }
    let hosts: Vec<String> = if hosts.is_empty() {
        vec!["127.0.0.1".into(), "::1".into(), "localhost".into()]
    } else {
        hosts.to_vec()
    };
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (ca_path, ca_key_path) = (dir.join(CA), dir.join(CA_KEY));
    let (issuer, ca_pem, new_authority) = if ca_path.exists() && ca_key_path.exists() {
        // The authority's certificate names it by these parameters and its key: the same
        // parameters and key sign as it did.
        let key = KeyPair::from_pem(&read(&ca_key_path)?)
            .with_context(|| format!("{} is not a PEM private key", ca_key_path.display()))?;
        (Issuer::new(authority()?, key), read(&ca_path)?, false)
    } else {
        let key = KeyPair::generate().context("cannot make a key")?;
        let params = authority()?;
        let cert = params.self_signed(&key)?;
        write_private(&ca_key_path, &key.serialize_pem())?;
        fs::write(&ca_path, cert.pem())
            .with_context(|| format!("cannot write {}", ca_path.display()))?;
        (Issuer::new(params, key), cert.pem(), true)
    };

    let key = KeyPair::generate().context("cannot make a key")?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    for host in &hosts {
        let host = host.trim().trim_matches(['[', ']']);
        let san = match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) if !host.is_empty() => SanType::DnsName(
                host.try_into()
                    .with_context(|| format!("\"{host}\" is not a host name or IP address"))?,
            ),
            Err(_) => bail!("--host must not be empty"),
        };
        params.subject_alt_names.push(san);
    }
    params
        .distinguished_name
        .push(DnType::CommonName, &hosts[0]);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let (y, m, d) = today()?;
    params.not_before = rcgen::date_time_ymd(y, m, d);
    params.not_after = params.not_before + std::time::Duration::from_secs(u64::from(days) * 86_400);
    let cert = params.signed_by(&key, &issuer)?;
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    write_private(&key_path, &key.serialize_pem())?;
    fs::write(&cert_path, format!("{}{}", cert.pem(), ca_pem))
        .with_context(|| format!("cannot write {}", cert_path.display()))?;
    Ok(CertFiles {
        ca: ca_path,
        cert: cert_path,
        key: key_path,
        new_authority,
    })
}

/// The local authority's parameters (the same each time: see [`generate`]).
fn authority() -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
        .distinguished_name
        .push(DnType::CommonName, "quintet local authority");
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2045, 1, 1);
    Ok(params)
}

/// Today's date (UTC): a certificate is valid from its start.
fn today() -> anyhow::Result<(i32, u8, u8)> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("the system clock is before 1970")?
        .as_millis();
    let text = quintet_core::clock::format_rfc3339_ms(i64::try_from(now_ms).unwrap_or(i64::MAX));
    let field = |range: std::ops::Range<usize>| text.get(range).and_then(|t| t.parse::<u16>().ok());
    let (y, m, d) = (
        field(0..4).map(i32::from),
        field(5..7).and_then(|m| u8::try_from(m).ok()),
        field(8..10).and_then(|d| u8::try_from(d).ok()),
    );
    match (y, m, d) {
        (Some(y), Some(m), Some(d)) => Ok((y, m, d)),
        _ => bail!("cannot read today's date from {text}"),
    }
}

fn read(path: &Path) -> anyhow::Result<String> {
    fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Write `text` readable by its owner only.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Run `quintet cert`: write the files and say how to use them.
pub fn run(args: CertArgs) -> anyhow::Result<()> {
    let files = generate(&args.dir, &args.hosts, args.days)?;
    let show = |p: &Path| p.display().to_string();
    let authority = if files.new_authority {
        "a new local authority"
    } else {
        "the local authority already there"
    };
    println!(
        "wrote {} (the server's certificate, signed by {authority}) and {}\n\n\
         serve HTTPS:       quintet serve --tls-cert {} --tls-key {}\n\
         trust it:          the authority {} (not the server's certificate)\n\
         \x20 curl:            curl --cacert {} https://127.0.0.1:6363/\n\
         \x20 quintet CLI:     QUINTET_CA_CERT={} quintet account list\n\
         \x20 Node:            NODE_EXTRA_CA_CERTS={} node app.js\n\
         \x20 this machine:    sudo cp {} /usr/local/share/ca-certificates/quintet-ca.crt && sudo update-ca-certificates\n\
         keep {} private: it can sign certificates your clients trust",
        show(&files.cert),
        show(&files.key),
        show(&files.cert),
        show(&files.key),
        show(&files.ca),
        show(&files.ca),
        show(&files.ca),
        show(&files.ca),
        show(&files.ca),
        show(&args.dir.join(CA_KEY)),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_is_made_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = generate(dir.path(), &[], 30).unwrap();
        assert!(first.new_authority);
        let ca = fs::read_to_string(&first.ca).unwrap();
        let second = generate(dir.path(), &["q.example.com".into()], 30).unwrap();
        assert!(!second.new_authority);
        assert_eq!(fs::read_to_string(&second.ca).unwrap(), ca);
        let chain = fs::read_to_string(&second.cert).unwrap();
        assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&second.key), 0o600);
            assert_eq!(mode(&dir.path().join(CA_KEY)), 0o600);
        }
        assert!(generate(dir.path(), &["".into()], 30).is_err());
        assert!(generate(dir.path(), &[], 0).is_err());
    }
}
