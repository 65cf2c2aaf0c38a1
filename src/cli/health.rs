//! `leasehold health`: a probe of a local server's health for container
//! and orchestrator health checks, so an image needs no curl.
//!
//! It reads the server's own settings (`LEASEHOLD_ADMIN_LISTEN`,
//! `LEASEHOLD_LISTEN`, `LEASEHOLD_TLS_CERT`), so in the image, a systemd
//! unit or a pod it needs no flags. It sends no credentials and reads
//! nothing but a status, so, like the kubelet's own probes, it does not
//! verify the server's certificate.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::cli::parse_duration;

/// Check a local server's health: `GET /healthz` on its admin port, or
/// with --grpc the gRPC health service on its gRPC port. Exits 0 when it
/// can take changes, 1 otherwise (the reason on stderr). For Docker's
/// HEALTHCHECK and exec probes.
#[derive(Args)]
pub struct HealthArgs {
    /// Ask gRPC health (`grpc.health.v1`, the server as a whole) on the
    /// gRPC port instead of `/healthz` on the admin port. It turns
    /// NOT_SERVING as soon as a shutdown begins: a readiness check.
    #[arg(long, conflicts_with = "alive")]
    grpc: bool,
    /// Succeed on any answer from `/healthz`, 200 or 503: the process is up
    /// and answering. For a liveness check, which must not restart a server
    /// for what a restart cannot mend (a full disk, a store being reopened).
    #[arg(long)]
    alive: bool,
    /// The server's admin address, as given to `serve` (0.0.0.0 and [::]
    /// are probed on loopback).
    #[arg(long, env = "LEASEHOLD_ADMIN_LISTEN", default_value = "127.0.0.1:9464")]
    admin_listen: SocketAddr,
    /// The server's gRPC address, as given to `serve`, for --grpc.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// The server's certificate, as given to `serve`: when set, the probe
    /// speaks TLS (the file itself is not read, and the server's
    /// certificate is not verified).
    #[arg(long, env = "LEASEHOLD_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// How long the whole check may take.
    #[arg(long, value_parser = parse_duration, default_value = "3s")]
    timeout: Duration,
}

/// Runs the check; prints `ok` or the reason it failed.
pub async fn health(a: HealthArgs) -> anyhow::Result<ExitCode> {
    let tls = a.tls_cert.is_some();
    let check = async {
        if a.grpc {
            grpc(loopback(a.listen), tls).await
        } else {
            healthz(loopback(a.admin_listen), tls, a.alive).await
        }
    };
    let r = match tokio::time::timeout(a.timeout, check).await {
        Ok(r) => r,
        Err(_) => Err(anyhow::anyhow!("no answer within {:?}", a.timeout)),
    };
    match r {
        Ok(()) => {
            println!("ok");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("unhealthy: {e:#}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Where to reach a server listening on `addr`: the wildcard addresses
/// are reached on loopback.
fn loopback(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}

/// `GET /healthz`: healthy on 200; with `alive`, on any HTTP answer.
async fn healthz(addr: SocketAddr, tls: bool, alive: bool) -> anyhow::Result<()> {
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect to the admin port {addr}"))?;
    let reply = if tls {
        let s = tls_connect(tcp, b"http/1.1").await?;
        get(s).await?
    } else {
        get(tcp).await?
    };
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let code = head.split_whitespace().nth(1).unwrap_or("");
    let answered = code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit());
    if code == "200" || (alive && answered) {
        Ok(())
    } else if !tls && (reply.is_empty() || reply.as_bytes().first() == Some(&0x15)) {
        // A TLS server answers plaintext with an alert record (0x15), or
        // closes the connection.
        bail!(
            "/healthz on {addr}: no HTTP answer; if the admin port serves TLS (serve \
             --tls-cert), give the probe --tls-cert too (or LEASEHOLD_TLS_CERT)"
        )
    } else if !answered {
        bail!(
            "/healthz on {addr}: not an HTTP answer: {:?}",
            head.chars().take(80).collect::<String>()
        )
    } else {
        bail!("/healthz on {addr} answered {code}: {}", body.trim())
    }
}

async fn get<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> anyhow::Result<String> {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut buf = Vec::new();
    // A TLS peer may close without close_notify: what was read counts.
    if let Err(e) = s.take(64 * 1024).read_to_end(&mut buf).await {
        if buf.is_empty() {
            return Err(e).context("read the answer of /healthz");
        }
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// gRPC health for the server as a whole (service ""): healthy on SERVING.
async fn grpc(addr: SocketAddr, tls: bool) -> anyhow::Result<()> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};

    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?;
    let channel = if tls {
        let connector = tower::service_fn(move |_: tonic::transport::Uri| async move {
            let tcp = TcpStream::connect(addr).await?;
            let s = tls_connect(tcp, b"h2").await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
        });
        endpoint.connect_with_connector(connector).await
    } else {
        endpoint.connect().await
    }
    .with_context(|| format!("connect to the gRPC port {addr}"))?;
    let status = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .with_context(|| format!("gRPC health on {addr}"))?
        .into_inner()
        .status();
    if status == ServingStatus::Serving {
        Ok(())
    } else {
        bail!("gRPC health on {addr}: {}", status.as_str_name())
    }
}

/// A TLS connection that trusts any certificate: the probe sends nothing
/// secret and reads only a status.
async fn tls_connect(
    tcp: TcpStream,
    alpn: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a valid name");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// Accepts the server's certificate whatever it is, but still checks
/// that the server holds its key (the handshake's signatures).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::loopback;

    #[test]
    fn wildcard_addresses_are_probed_on_loopback() {
        let l = |s: &str| loopback(s.parse().unwrap()).to_string();
        assert_eq!(l("0.0.0.0:9464"), "127.0.0.1:9464");
        assert_eq!(l("[::]:9464"), "[::1]:9464");
        assert_eq!(l("10.0.0.5:9464"), "10.0.0.5:9464");
    }
}
