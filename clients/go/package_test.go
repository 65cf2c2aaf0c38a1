package leasehold_test

import (
	"archive/zip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// The module as `go get` fetches it once the tag clients/go/v<Version> is
// published: a module zip (built here by the rules of the module proxy
// protocol), its .mod and .info, served from a directory laid out as a
// GOPROXY. A user's module, in a clean directory, gets it with `go get
// ...@v<Version>`, builds a program on it, and the program acquires a
// lease from a real server. Nothing of this module comes from the network.

const modulePath = "github.com/leasehold/leasehold/clients/go"

// moduleFiles lists the files of the module zip, by their paths in this
// folder (slash-separated): every regular file, but not those under a
// folder with a go.mod of its own (another module: examples/two-workers)
// nor in version control folders, as the module zip rules say.
func moduleFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch {
			case p == ".":
				return nil
			case d.Name() == ".git" || d.Name() == ".hg" || d.Name() == ".svn" || d.Name() == ".bzr":
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if d.Type().IsRegular() {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// writeModuleZip writes the module zip: every file under the prefix
// "<module>@<version>/".
func writeModuleZip(t *testing.T, dst, version string, files []string) {
	t.Helper()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	for _, name := range files {
		w, err := zw.Create(modulePath + "@" + version + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.Open(filepath.FromSlash(name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(w, src)
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}

// zipNames lists the names in a zip file.
func zipNames(t *testing.T, p string) []string {
	t.Helper()
	zr, err := zip.OpenReader(p)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	return names
}

// goEnv is `go env NAME`.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

const userProgram = `package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func main() {
	client, err := leasehold.Dial(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = client.WithLock(ctx, "packaged", 10*time.Second, func(ctx context.Context, lock *leasehold.Lock) error {
		fmt.Printf("locked token=%d version=%s\n", lock.Token(), leasehold.Version)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	a, err := client.Acquire(ctx, "packaged", "user", 30*time.Second, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("acquired=%v token=%d\n", a.Acquired, a.Lease.Token)
}
`

func TestModuleZipInstallsWithGoGet(t *testing.T) {
	version := "v" + leasehold.Version
	files := moduleFiles(t)
	for _, want := range []string{"LICENSE", "go.mod", "go.sum", "README.md", "client.go", "lock.go", "leaseholdv1/leasehold.pb.go"} {
		if !slices.Contains(files, want) {
			t.Fatalf("the module has no %s: %v", want, files)
		}
	}

	// The proxy: <dir>/<module>/@v/{list,<version>.info,.mod,.zip}.
	proxy := t.TempDir()
	at := filepath.Join(proxy, filepath.FromSlash(modulePath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	zipPath := filepath.Join(at, version+".zip")
	writeModuleZip(t, zipPath, version, files)
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339))
	for name, body := range map[string][]byte{"list": []byte(version + "\n"), version + ".mod": gomod, version + ".info": []byte(info)} {
		if err := os.WriteFile(filepath.Join(at, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile("LICENSE"); err != nil || !strings.Contains(string(b), "Apache License") || !strings.Contains(string(b), "Version 2.0") {
		t.Fatalf("LICENSE is not the Apache-2.0 text: %v", err)
	}
	names := zipNames(t, zipPath)
	prefix := modulePath + "@" + version + "/"
	for _, want := range []string{"LICENSE", "go.mod", "lock.go", "electorset.go"} {
		if !slices.Contains(names, prefix+want) {
			t.Fatalf("the zip has no %s", want)
		}
	}
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) || strings.Contains(n, "/examples/two-workers/") || strings.Contains(n, "/.git/") {
			t.Fatalf("the zip has %s", n)
		}
	}

	// A user's module in a clean directory, with a module cache of its
	// own (the shared one is not given a version made from this tree),
	// fed by this proxy first, then by the machine's module cache and
	// proxy for the client's dependencies. Only this module skips the
	// checksum database: it is not published.
	user := t.TempDir()
	shared := goEnv(t, "GOMODCACHE")
	upstream := goEnv(t, "GOPROXY")
	if v := os.Getenv("LEASEHOLD_TEST_UPSTREAM_GOPROXY"); v != "" {
		upstream = v // "off": check that nothing comes from the network
	}
	env := append(os.Environ(),
		"GOMODCACHE="+filepath.Join(t.TempDir(), "mod"),
		"GOPROXY="+strings.Join([]string{"file://" + filepath.ToSlash(proxy),
			"file://" + path.Join(filepath.ToSlash(shared), "cache", "download"), upstream}, ","),
		"GONOSUMDB=github.com/leasehold",
		// -modcacherw: the test's module cache can be removed; -trimpath:
		// the compiled dependencies are shared with the build cache's.
		"GOFLAGS=-modcacherw -trimpath -buildvcs=false",
		"GOWORK=off", "GOTOOLCHAIN=local")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = user, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "init", "example.com/user")
	// The checksums of the client's dependencies, as its own go.sum pins
	// them (the same the checksum database gives a user): so that they
	// need no lookup on the network either.
	sums, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(user, "go.sum"), sums, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(user, "main.go"), []byte(userProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	run("get", modulePath+"@"+version)
	mod, err := os.ReadFile(filepath.Join(user, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*(require )?` + regexp.QuoteMeta(modulePath+" "+version) + `( // indirect)?$`).Match(mod) {
		t.Fatalf("go.mod after go get:\n%s", mod)
	}
	exe := filepath.Join(user, "user")
	run("build", "-o", exe, ".")

	s := startServer(t)
	out, err := exec.Command(exe, s.target).CombinedOutput()
	if err != nil {
		t.Fatalf("the program: %v\n%s", err, out)
	}
	want := fmt.Sprintf("locked token=1 version=%s\nacquired=true token=2\n", leasehold.Version)
	if string(out) != want {
		t.Fatalf("the program printed %q, want %q", out, want)
	}
	if l, err := dial(t, s).GetLease(ctxT(t), "packaged"); err != nil || l.Holder != "user" || l.Token != 2 {
		t.Fatalf("server says %+v %v", l, err)
	}
}
