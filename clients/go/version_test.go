package leasehold_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// The version is kept in VERSION (the tag to publish is
// clients/go/v<VERSION>), in the Version constant, and in the require
// lines of the two-workers example and the README.
func TestVersionMatchesTheVersionFile(t *testing.T) {
	b, err := os.ReadFile("VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimSpace(string(b)); v != leasehold.Version {
		t.Fatalf("VERSION says %q, leasehold.Version is %q", v, leasehold.Version)
	}
	if strings.HasPrefix(leasehold.Version, "v") || strings.Count(leasehold.Version, ".") != 2 {
		t.Fatalf("Version %q: want MAJOR.MINOR.PATCH, without the v of the tag", leasehold.Version)
	}
}

// The two-workers example requires this version, through the replace
// directive the README shows; the README shows both lines as they are.
func TestExampleAndReadmeRequireThisVersion(t *testing.T) {
	const module = "github.com/leasehold/leasehold/clients/go"
	gomod, err := os.ReadFile(filepath.Join("examples", "two-workers", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	require := "require " + module + " v" + leasehold.Version
	replace := "replace " + module + " => ../.."
	for _, line := range []string{require, replace} {
		if !strings.Contains("\n"+string(gomod)+"\n", "\n"+line+"\n") {
			t.Errorf("examples/two-workers/go.mod has no line %q", line)
		}
		if !strings.Contains(string(readme), line+"\n") {
			t.Errorf("README.md does not show %q", line)
		}
	}
	if tag := "clients/go/v" + leasehold.Version; !strings.Contains(string(readme), tag) {
		t.Errorf("README.md does not name the tag %s", tag)
	}
}
