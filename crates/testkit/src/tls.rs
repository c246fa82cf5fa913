//! Throwaway certificates for HTTPS tests, generated at test time.
//!
//! Generated rather than committed: no private key lives in the repository (where secret
//! scanners would flag it and someone might reuse it), nothing expires under the suite, and
//! each test gets its own authority.

use std::{
    fs,
    path::{Path, PathBuf},
};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};

/// A certificate authority and a server certificate it signed, for `127.0.0.1`, `::1` and
/// `localhost`, written as PEM files.
#[derive(Debug, Clone)]
pub struct TestCerts {
    /// The authority's certificate, PEM (what clients trust).
    pub ca_pem: String,
    /// File holding [`TestCerts::ca_pem`].
    pub ca: PathBuf,
    /// The server's certificate chain file.
    pub cert: PathBuf,
    /// The server's private key file.
    pub key: PathBuf,
}

impl TestCerts {
    /// Generate the authority and the server certificate into `dir` (created when missing).
    pub fn generate(dir: &Path) -> Self {
        fs::create_dir_all(dir).expect("certificate directory");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "quintet test CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);

        let server_key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned()]).expect("server params");
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
        params
            .distinguished_name
            .push(DnType::CommonName, "quintet test server");
        let server_cert = params
            .signed_by(&server_key, &issuer)
            .expect("server certificate");

        let certs = Self {
            ca_pem: ca_cert.pem(),
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        fs::write(&certs.ca, &certs.ca_pem).expect("write CA");
        fs::write(&certs.cert, server_cert.pem()).expect("write certificate");
        fs::write(&certs.key, server_key.serialize_pem()).expect("write key");
        certs
    }
}
