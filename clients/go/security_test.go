package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// TLS, mutual TLS, bearer tokens and the policy, against the real server
// started with the certificates and policy of clients/tools/pki.sh (alice
// may lease, write and read every job; bob may only read jobs "bob/...").

func secret(t *testing.T, pki, who string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pki, who+".token"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func dialWith(t *testing.T, s *server, sec leasehold.Security) *leasehold.Client {
	t.Helper()
	c, err := leasehold.DialWith(s.target, sec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestSecurity(t *testing.T) {
	s, pki := startSecureServer(t)
	ca := filepath.Join(pki, "ca.pem")

	t.Run("TLS with a token: acquire, renew, write, read, stream", func(t *testing.T) {
		c, ctx, job := dialWith(t, s, leasehold.Security{CAFile: ca, Token: secret(t, pki, "alice")}), ctxT(t), uniqueJob("tls")
		a, err := c.Acquire(ctx, job, "w", 30*time.Second, 0)
		if err != nil || !a.Acquired || a.Lease.Principal != "alice" {
			t.Fatalf("acquire: %+v %v", a, err)
		}
		tok := a.Lease.Token
		if l, err := c.Renew(ctx, job, "w", tok, 30*time.Second); err != nil || l.Token != tok {
			t.Fatalf("renew: %+v %v", l, err)
		}
		if v, err := c.CheckedWrite(ctx, job, tok, []byte("k"), []byte("v")); err != nil || v != 1 {
			t.Fatalf("write: %v %v", v, err)
		}
		if v, err := c.Read(ctx, job, []byte("k")); err != nil || string(v.Value) != "v" {
			t.Fatalf("read: %+v %v", v, err)
		}
		if l, err := c.GetLease(ctx, job); err != nil || l.Holder != "w" || l.Principal != "alice" {
			t.Fatalf("get lease: %+v %v", l, err)
		}
		ws, err := c.WriteStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(job, tok, []byte("s"), []byte("1"))})
		if err != nil || out[0].Kind != leasehold.OutcomeWritten {
			t.Fatalf("stream write: %+v %v", out, err)
		}
		_ = ws.Close()
	})

	t.Run("ListWaiters names each waiter's principal; it needs read", func(t *testing.T) {
		c, ctx, job := dialWith(t, s, leasehold.Security{CAFile: ca, Token: secret(t, pki, "alice")}), ctxT(t), uniqueJob("waiters")
		if a, err := c.Acquire(ctx, job, "w", 30*time.Second, 0); err != nil || !a.Acquired {
			t.Fatalf("acquire: %+v %v", a, err)
		}
		waiting := waitAcquire(c, job, "w2", 30*time.Second)
		var line leasehold.WaitingLine
		waitUntil(t, patience, "w2 in line", func() bool {
			var err error
			line, err = c.ListWaiters(ctx, job, 0)
			return err == nil && line.Waiting == 1
		})
		if want := (leasehold.Waiter{Holder: "w2", Principal: "alice"}); len(line.Waiters) != 1 || line.Waiters[0] != want {
			t.Fatalf("the line: %+v, want %+v", line, want)
		}
		bob := dialWith(t, s, leasehold.Security{CAFile: ca, Token: secret(t, pki, "bob")})
		_, err := bob.ListWaiters(ctx, job, 0)
		var pd *leasehold.PermissionDeniedError
		if !errors.As(err, &pd) || pd.Action != "read" || pd.Job != job {
			t.Fatalf("bob: want PermissionDenied for read, got %v", err)
		}
		if err := c.Release(ctx, job, "w", 1); err != nil {
			t.Fatal(err)
		}
		if g := <-waiting; !g.Acquired {
			t.Fatalf("w2: %+v", g)
		}
	})

	t.Run("the CA as PEM bytes", func(t *testing.T) {
		pem, _ := os.ReadFile(ca)
		c := dialWith(t, s, leasehold.Security{CAPEM: pem, Token: secret(t, pki, "alice")})
		if a, err := c.Acquire(ctxT(t), uniqueJob("pem"), "w", 30*time.Second, 0); err != nil || !a.Acquired {
			t.Fatalf("acquire: %+v %v", a, err)
		}
	})

	t.Run("no token: Unauthenticated", func(t *testing.T) {
		c := dialWith(t, s, leasehold.Security{CAFile: ca})
		_, err := c.Acquire(ctxT(t), uniqueJob("none"), "w", 30*time.Second, 0)
		var ue *leasehold.UnauthenticatedError
		if !errors.Is(err, leasehold.ErrUnauthenticated) || !errors.As(err, &ue) || leasehold.Retryable(err) {
			t.Fatalf("want Unauthenticated, got %v", err)
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("code %v", status.Code(err))
		}
	})

	t.Run("a wrong token: Unauthenticated, on calls and streams", func(t *testing.T) {
		c, ctx := dialWith(t, s, leasehold.Security{CAFile: ca, Token: "not-a-secret-of-anyone"}), ctxT(t)
		_, err := c.Read(ctx, uniqueJob("wrong"), []byte("k"))
		if !errors.Is(err, leasehold.ErrUnauthenticated) || strings.Contains(err.Error(), "not-a-secret") {
			t.Fatalf("want Unauthenticated, got %v", err)
		}
		ws, err := c.WriteStream(ctx)
		if err == nil {
			_, err = ws.Write(ctx, []leasehold.StreamWrite{leasehold.Put(uniqueJob("wrong"), 1, []byte("k"), []byte("v"))})
			_ = ws.Close()
		}
		if !errors.Is(err, leasehold.ErrUnauthenticated) {
			t.Fatalf("stream: want Unauthenticated, got %v", err)
		}
	})

	t.Run("a principal without the grant: PermissionDenied naming action and job", func(t *testing.T) {
		c, ctx, job := dialWith(t, s, leasehold.Security{CAFile: ca, Token: secret(t, pki, "bob")}), ctxT(t), uniqueJob("denied")
		_, err := c.Acquire(ctx, job, "w", 30*time.Second, 0)
		var pd *leasehold.PermissionDeniedError
		if !errors.Is(err, leasehold.ErrPermissionDenied) || !errors.As(err, &pd) || leasehold.Retryable(err) {
			t.Fatalf("want PermissionDenied, got %v", err)
		}
		if pd.Action != "lease" || pd.Job != job {
			t.Fatalf("action %q job %q", pd.Action, pd.Job)
		}
		if v, err := c.Read(ctx, "bob/"+job, []byte("k")); err != nil || v.Found {
			t.Fatalf("bob reads his own jobs: %+v %v", v, err)
		}
	})

	t.Run("mutual TLS with a client certificate", func(t *testing.T) {
		ctx, job := ctxT(t), uniqueJob("mtls")
		a := dialWith(t, s, leasehold.Security{CAFile: ca,
			CertFile: filepath.Join(pki, "alice.pem"), KeyFile: filepath.Join(pki, "alice-key.pem")})
		r, err := a.Acquire(ctx, job, "w", 30*time.Second, 0)
		if err != nil || !r.Acquired || r.Lease.Principal != "alice" {
			t.Fatalf("acquire: %+v %v", r, err)
		}
		cert, _ := os.ReadFile(filepath.Join(pki, "bob.pem"))
		key, _ := os.ReadFile(filepath.Join(pki, "bob-key.pem"))
		b := dialWith(t, s, leasehold.Security{CAFile: ca, CertPEM: cert, KeyPEM: key})
		_, err = b.CheckedWrite(ctx, job, r.Lease.Token, []byte("k"), []byte("v"))
		var pd *leasehold.PermissionDeniedError
		if !errors.As(err, &pd) || pd.Action != "write" || pd.Job != job {
			t.Fatalf("want PermissionDenied write, got %v", err)
		}
	})

	t.Run("the Elector leads over TLS with a token", func(t *testing.T) {
		c, job := dialWith(t, s, leasehold.Security{CAFile: ca, Token: secret(t, pki, "alice")}), uniqueJob("elector")
		r := start(t, c, job, "e", 5*time.Second)
		waitUntil(t, 10*time.Second, "leadership", r.IsLeader)
		tok, _ := r.Token()
		if v, err := c.CheckedWrite(ctxT(t), job, tok, []byte("k"), []byte("v")); err != nil || v != 1 {
			t.Fatalf("write: %v %v", v, err)
		}
	})

	t.Run("an Elector refused by the policy stops and says why", func(t *testing.T) {
		c := dialWith(t, s, leasehold.Security{CAFile: ca, Token: secret(t, pki, "bob")})
		e, err := leasehold.NewElector(c, leasehold.ElectorConfig{Job: uniqueJob("refused"), Name: "e", TTL: 5 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Run(ctx); !errors.Is(err, leasehold.ErrPermissionDenied) || ctx.Err() != nil {
			t.Fatalf("Run: want PermissionDenied at once, got %v", err)
		}
	})
}

func TestTokenWithoutTLS(t *testing.T) {
	pki := makePKI(t)
	s := startServer(t, "--policy", filepath.Join(pki, "policy.toml"))
	c := dialWith(t, s, leasehold.Security{Token: secret(t, pki, "alice")})
	ctx, job := ctxT(t), uniqueJob("plain")
	if a, err := c.Acquire(ctx, job, "w", 30*time.Second, 0); err != nil || a.Lease.Principal != "alice" {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	if _, err := dial(t, s).GetLease(ctx, job); !errors.Is(err, leasehold.ErrUnauthenticated) {
		t.Fatalf("want Unauthenticated, got %v", err)
	}
}

func TestSecuritySettings(t *testing.T) {
	if _, err := leasehold.DialWith("127.0.0.1:1", leasehold.Security{CertPEM: []byte("x")}); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Fatalf("a certificate without its key: %v", err)
	}
	sec := leasehold.Security{Token: "very-secret"}
	if strings.Contains(fmt.Sprintf("%v %+v %#v", sec, sec, sec), "very-secret") {
		t.Fatal("Security shows the token")
	}
	tok, err := leasehold.NewBearerToken(" very-secret\n", true)
	if err != nil || strings.Contains(fmt.Sprintf("%v %+v %#v", tok, tok, tok), "very-secret") {
		t.Fatalf("BearerToken shows the token, or %v", err)
	}
	md, _ := tok.GetRequestMetadata(context.Background())
	if md["authorization"] != "Bearer very-secret" || !tok.RequireTransportSecurity() {
		t.Fatalf("metadata %v", md)
	}
}

func TestAccessErrorsDecode(t *testing.T) {
	st, _ := status.New(codes.PermissionDenied, "m").WithDetails(&errdetails.ErrorInfo{
		Reason: "PERMISSION_DENIED", Domain: leasehold.Domain, Metadata: map[string]string{"action": "read", "job": "j"},
	})
	var pd *leasehold.PermissionDeniedError
	if err := leasehold.FromError(st.Err()); !errors.As(err, &pd) || pd.Action != "read" || pd.Job != "j" {
		t.Fatalf("got %v", err)
	}
	st, _ = status.New(codes.Unauthenticated, "m").WithDetails(&errdetails.ErrorInfo{Reason: "UNAUTHENTICATED", Domain: leasehold.Domain})
	if err := leasehold.FromError(st.Err()); !errors.Is(err, leasehold.ErrUnauthenticated) {
		t.Fatalf("got %v", err)
	}
	if err := leasehold.FromError(status.Error(codes.PermissionDenied, "m")); !errors.Is(err, leasehold.ErrPermissionDenied) {
		t.Fatalf("without ErrorInfo: %v", err)
	}
}

func TestHTTPSTargetIsTLS(t *testing.T) {
	s, pki := startSecureServer(t)
	// Without the test CA, the system's roots cannot verify the server:
	// the connection is TLS (it fails the handshake), never plaintext.
	c, err := leasehold.Dial("https://" + s.target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.GetLease(ctx, "x"); !errors.Is(err, leasehold.ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("want a TLS failure, got %v", err)
	}
	c3, err := leasehold.DialWith("https://"+s.target, leasehold.Security{CAFile: filepath.Join(pki, "ca.pem"), Token: secret(t, pki, "alice")})
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := c3.GetLease(ctx, "x"); err != nil {
		t.Fatalf("https:// with the CA: %v", err)
	}
}
