package leasehold

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Security holds the TLS settings and credentials for DialWith. With a CA
// or a client certificate (or an "https://" target) the connection is TLS;
// otherwise it is plaintext, as with Dial. Each PEM may be given as bytes
// or as a file (not both).
type Security struct {
	// CAPEM or CAFile: the CA certificate(s) that signed the server's
	// certificate. Without either, a TLS connection uses the system's roots.
	CAPEM  []byte
	CAFile string
	// CertPEM/KeyPEM or CertFile/KeyFile: this client's certificate and
	// its key, for mutual TLS.
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
	// Token is a bearer secret of a principal in the server's policy, sent
	// as "authorization: Bearer SECRET" on every call, streams included.
	Token string
	// ServerName is the name the server's certificate must carry; default:
	// the target's host.
	ServerName string
}

// String describes the settings without the token.
func (s Security) String() string {
	return fmt.Sprintf("Security{CA:%t Cert:%t Token:%t ServerName:%q}",
		s.CAPEM != nil || s.CAFile != "", s.CertPEM != nil || s.CertFile != "", s.Token != "", s.ServerName)
}

// GoString is String, so that %#v does not print the token either.
func (s Security) GoString() string { return s.String() }

func (s Security) tls() bool {
	return s.CAPEM != nil || s.CAFile != "" || s.CertPEM != nil || s.CertFile != ""
}

func pemOf(field string, b []byte, file string) ([]byte, error) {
	if b != nil && file != "" {
		return nil, &InvalidArgumentError{Message: "give " + field + "PEM or " + field + "File, not both", Field: field}
	}
	if file == "" {
		return b, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &InvalidArgumentError{Message: "cannot read " + field + " file: " + err.Error(), Field: field}
	}
	return data, nil
}

// TLSConfig is the tls.Config for these settings (nil when they ask for no
// TLS): the CA as its root pool, the client certificate if any, TLS 1.2
// at least.
func (s Security) TLSConfig() (*tls.Config, error) {
	return s.tlsConfig(false)
}

func (s Security) tlsConfig(force bool) (*tls.Config, error) {
	if !force && !s.tls() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName}
	ca, err := pemOf("CA", s.CAPEM, s.CAFile)
	if err != nil {
		return nil, err
	}
	if ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, &InvalidArgumentError{Message: "the CA holds no PEM certificate", Field: "ca"}
		}
		cfg.RootCAs = pool
	}
	cert, err := pemOf("Cert", s.CertPEM, s.CertFile)
	if err != nil {
		return nil, err
	}
	key, err := pemOf("Key", s.KeyPEM, s.KeyFile)
	if err != nil {
		return nil, err
	}
	switch {
	case cert != nil && key != nil:
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, &InvalidArgumentError{Message: "bad client certificate or key: " + err.Error(), Field: "cert"}
		}
		cfg.Certificates = []tls.Certificate{pair}
	case cert != nil || key != nil:
		return nil, &InvalidArgumentError{Message: "a client certificate needs its key, and a key its certificate", Field: "cert"}
	}
	return cfg, nil
}

// BearerToken is grpc.PerRPCCredentials that send "authorization: Bearer
// SECRET" on every call. Its String method does not show the secret.
type BearerToken struct {
	value      string
	requireTLS bool
}

// NewBearerToken makes the credentials for secret (trimmed; printable
// ASCII). With requireTLS, gRPC refuses to send it over a plaintext
// connection.
func NewBearerToken(secret string, requireTLS bool) (BearerToken, error) {
	secret = strings.TrimSpace(secret)
	if secret == "" {
		return BearerToken{}, &InvalidArgumentError{Message: "the bearer token is empty", Field: "token"}
	}
	for _, c := range secret {
		if c <= 0x20 || c >= 0x7f {
			return BearerToken{}, &InvalidArgumentError{Message: "the bearer token must be printable ASCII without spaces", Field: "token"}
		}
	}
	return BearerToken{value: "Bearer " + secret, requireTLS: requireTLS}, nil
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b BearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.value}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (b BearerToken) RequireTransportSecurity() bool { return b.requireTLS }

// String does not show the secret.
func (b BearerToken) String() string { return "BearerToken{<secret>}" }

// GoString does not show the secret.
func (b BearerToken) GoString() string { return b.String() }

// DialOptions are the grpc.DialOptions for these settings, for
// grpc.NewClient or Dial: transport credentials (TLS, or plaintext) and the
// bearer token, if any. https says whether the target was "https://".
func (s Security) DialOptions(https bool) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	tlsOn := https || s.tls()
	if tlsOn {
		cfg, err := s.tlsConfig(true)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	if s.Token != "" {
		tok, err := NewBearerToken(s.Token, tlsOn)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
	}
	return opts, nil
}

// DialWith makes a client for target with TLS and credentials:
//
//	client, err := leasehold.DialWith("leasehold.internal:50051", leasehold.Security{
//		CAFile:   "/etc/leasehold/ca.pem",
//		CertFile: "/etc/leasehold/worker.pem", KeyFile: "/etc/leasehold/worker-key.pem",
//		Token:    os.Getenv("LEASEHOLD_SECRET"),
//	})
//
// The target may be "host:port", "http://host:port" or "https://host:port".
// opts are passed on to grpc.NewClient after these settings.
func DialWith(target string, sec Security, opts ...grpc.DialOption) (*Client, error) {
	https := strings.HasPrefix(target, "https://")
	own, err := sec.DialOptions(https)
	if err != nil {
		return nil, err
	}
	return Dial(strings.TrimPrefix(target, "https://"), append(own, opts...)...)
}
