package leasehold_test

import (
	"os"
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
