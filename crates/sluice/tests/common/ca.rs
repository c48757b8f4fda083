//! A private certificate authority for the tests of TLS listeners.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::CertificateDer;

/// A private CA that signs certificates into a directory.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let ca = Ca {
            issuer,
            dir: dir.to_owned(),
        };
        std::fs::write(ca.path(name), ca.issuer.pem()).expect("write CA");
        ca
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(format!("{file}.pem"))
    }

    /// Signs a certificate for `names`, written as `<file>.pem` and `<file>-key.pem`;
    /// returns its DER.
    pub fn sign(&self, file: &str, names: &[&str]) -> CertificateDer<'static> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params.distinguished_name.push(DnType::CommonName, file);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        std::fs::write(self.path(file), cert.pem()).expect("write cert");
        std::fs::write(self.path(&format!("{file}-key")), key.serialize_pem()).expect("key");
        cert.der().clone()
    }
}
