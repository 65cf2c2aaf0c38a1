//go:build !linux

package leasehold_test

import "os/exec"

// dieWithTest: only Linux can tie a child's life to its parent's.
func dieWithTest(cmd *exec.Cmd) {}
