//! TLS for the health probe of an HTTPS server (`--ssl-certfile`,
//! `--done health=https://...`): rustls with Graviola's cryptography (pure
//! Rust and assembly, built by rustc alone: no C cross compiler for the
//! static aarch64 build).
//!
//! The server's certificate is not checked: a probe of an address of this
//! host counts only when the engine's own process tree holds the listening
//! socket (`owner.rs`), which ties the answer to the engine better than any
//! certificate could (a self-signed one, an internal CA, a name that is not
//! the probed address); a URL on another host is trusted as given, as an
//! `http://` one is. The probe sends no secret and reads one status line.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};

/// What this CPU lacks of what Graviola needs (it aborts the process on
/// its first call without them): None when TLS can be used.
pub fn unsupported() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        let have = [
            ("aes", std::arch::is_x86_feature_detected!("aes")),
            (
                "pclmulqdq",
                std::arch::is_x86_feature_detected!("pclmulqdq"),
            ),
            ("bmi1", std::arch::is_x86_feature_detected!("bmi1")),
            ("bmi2", std::arch::is_x86_feature_detected!("bmi2")),
            ("adx", std::arch::is_x86_feature_detected!("adx")),
            ("avx", std::arch::is_x86_feature_detected!("avx")),
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
        ];
        have.iter().find(|(_, ok)| !ok).map(|(name, _)| *name)
    }
    #[cfg(target_arch = "aarch64")]
    {
        let have = [
            ("neon", std::arch::is_aarch64_feature_detected!("neon")),
            ("aes", std::arch::is_aarch64_feature_detected!("aes")),
            ("pmull", std::arch::is_aarch64_feature_detected!("pmull")),
            ("sha2", std::arch::is_aarch64_feature_detected!("sha2")),
        ];
        have.iter().find(|(_, ok)| !ok).map(|(name, _)| *name)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Some("x86_64 or aarch64")
    }
}

/// Accepts any certificate (see the module's note), but only the
/// signature schemes the provider can verify, so the handshake is one a
/// checking client would make.
#[derive(Debug)]
struct AnyCertificate(Vec<SignatureScheme>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.clone()
    }
}

/// The one client configuration, made at the first HTTPS probe.
fn config() -> Result<Arc<ClientConfig>, rustls::Error> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, rustls::Error>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            // Classic key exchange only: the post-quantum hybrid Graviola
            // prefers costs an ML-KEM key per probe, and its code and
            // tables in memory, to protect the secrecy of an answer that
            // holds none.
            let provider = CryptoProvider {
                kx_groups: vec![
                    &rustls_graviola::kx::X25519,
                    &rustls_graviola::kx::P256,
                    &rustls_graviola::kx::P384,
                ],
                ..rustls_graviola::default_provider()
            };
            let schemes = provider
                .signature_verification_algorithms
                .supported_schemes();
            let config = ClientConfig::builder_with_provider(Arc::new(provider))
                .with_safe_default_protocol_versions()?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(schemes)))
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

/// A client connection to `host` (as written in the URL, brackets kept for
/// IPv6) at `addr`: the name sent (SNI) is the host's when it is a DNS
/// name, else the address.
pub fn connect(host: &str, addr: IpAddr) -> Result<ClientConnection, rustls::Error> {
    if let Some(missing) = unsupported() {
        return Err(rustls::Error::General(format!(
            "this CPU lacks {missing}, which keepwrap's TLS needs"
        )));
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = match ServerName::try_from(bare.to_string()) {
        Ok(n) => n,
        Err(_) => ServerName::IpAddress(addr.into()),
    };
    ClientConnection::new(config()?, name)
}
